//! Static report of AMDGPU assembly (in progress).
