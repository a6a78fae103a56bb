//! `cp.async` bookkeeping of one thread: copies are recorded when issued and land in shared
//! memory only when the thread's `cp.async.wait_group n` retires their group.
//!
//! PTX semantics: `commit_group` closes the copies issued since the last commit into a group
//! (an empty group too: pipelines commit empty groups in their tail so wait counts line up);
//! `wait_group n` waits until at most `n` of the *committed* groups are incomplete. Copies issued
//! after the last commit belong to no group and are not waited for. `wgmma.commit_group` /
//! `wgmma.wait_group` count the same way, so the same bookkeeping holds a thread's wgmma
//! results until they land.

use std::collections::VecDeque;

/// One issued copy, with the source bytes it read at issue.
#[derive(Clone, Copy, Debug)]
pub struct Copy {
    /// The destination shared buffer and byte offset in it.
    pub buf: u32,
    pub off: usize,
    pub len: usize,
    /// The bytes to land (zeros when the copy's predicate was false).
    pub data: [u8; 16],
    /// The issuing instruction (for reports).
    pub pc: u32,
}

/// One thread's asynchronous operations, in commit groups.
#[derive(Clone, Debug)]
pub struct AsyncGroups<T> {
    current: Vec<T>,
    committed: VecDeque<Vec<T>>,
}

impl<T> Default for AsyncGroups<T> {
    fn default() -> Self {
        AsyncGroups {
            current: vec![],
            committed: VecDeque::new(),
        }
    }
}

/// A thread's `cp.async` copies.
pub type CpState = AsyncGroups<Copy>;

impl<T> AsyncGroups<T> {
    pub fn issue(&mut self, c: T) {
        self.current.push(c);
    }

    /// Issue `c` as a committed group of its own (an AMD buffer load: `vmcnt` counts loads one
    /// by one). Operations issued earlier and not yet committed stay uncommitted.
    pub fn issue_alone(&mut self, c: T) {
        self.committed.push_back(vec![c]);
    }

    pub fn commit(&mut self) {
        let g = std::mem::take(&mut self.current);
        self.committed.push_back(g);
    }

    /// The operations that `wait_group n` retires, oldest first.
    pub fn wait(&mut self, n: u32) -> Vec<T> {
        let mut out = vec![];
        while self.committed.len() > n as usize {
            if let Some(g) = self.committed.pop_front() {
                out.extend(g);
            }
        }
        out
    }

    pub fn in_flight(&self) -> usize {
        self.current.len() + self.committed.iter().map(Vec::len).sum::<usize>()
    }

    /// Every operation not yet retired, the most recently issued first.
    pub fn newest_first(&self) -> impl Iterator<Item = &T> {
        self.current
            .iter()
            .rev()
            .chain(self.committed.iter().rev().flat_map(|g| g.iter().rev()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(pc: u32) -> Copy {
        Copy {
            buf: 0,
            off: 0,
            len: 16,
            data: [0; 16],
            pc,
        }
    }

    #[test]
    fn wait_counts_committed_groups_only() {
        let mut s = CpState::default();
        s.issue(copy(1));
        s.commit();
        s.issue(copy(2));
        s.commit();
        s.commit(); // an empty group
        s.issue(copy(3)); // uncommitted
        assert!(s.wait(3).is_empty());
        let w: Vec<u32> = s.wait(1).iter().map(|c| c.pc).collect();
        assert_eq!(w, vec![1, 2]);
        assert!(
            s.wait(0).is_empty(),
            "the empty group retires, the uncommitted copy stays"
        );
        assert_eq!(s.in_flight(), 1);
        s.commit();
        assert_eq!(s.wait(0).len(), 1);
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn loads_issued_alone_are_groups_of_their_own() {
        let mut s = CpState::default();
        s.issue(copy(1)); // uncommitted: not part of the loads' groups
        for pc in 2..6 {
            s.issue_alone(copy(pc));
        }
        let w: Vec<u32> = s.wait(2).iter().map(|c| c.pc).collect();
        assert_eq!(w, vec![2, 3]);
        assert_eq!(s.in_flight(), 3);
        let w: Vec<u32> = s.wait(0).iter().map(|c| c.pc).collect();
        assert_eq!(w, vec![4, 5]);
        assert_eq!(s.in_flight(), 1);
    }
}
