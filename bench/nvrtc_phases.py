# Where a cold compile's time goes: compiles each CUDA source with NVRTC (the runtime's flags,
# NVRTC's cache off), interleaving the files over REPS rounds so machine noise hits them alike,
# and reports the total, NVRTC's own phase times (--time: front end, NVVM, PTX translation =
# ptxas) and standalone ptxas on the same PTX (the floor for any path that emits PTX).
#   python3 bench/nvrtc_phases.py a.cu b.cu ...      (NVRTC=/path/libnvrtc.so.13 to choose)
import ctypes, glob, os, re, statistics, subprocess, sys, time
cands = [os.environ.get('NVRTC', '')] + glob.glob('/usr/local/cuda/lib64/libnvrtc.so.13') + glob.glob('/work/main/target/cuda-tools/nvidia/cu13/lib/libnvrtc.so.13')
lib = next(ctypes.CDLL(c) for c in cands if c and os.path.exists(c))
def comp(src, opts):
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) == 0
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    t = time.perf_counter(); r = lib.nvrtcCompileProgram(prog, len(opts), arr); dt = time.perf_counter() - t
    n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
    m = ctypes.c_size_t(); lib.nvrtcGetPTXSize(prog, ctypes.byref(m)); ptx = ctypes.create_string_buffer(m.value); lib.nvrtcGetPTX(prog, ptx)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return r, dt * 1e3, log.value.decode(), ptx.value.decode()
ptxas = next((p for p in ['/usr/local/cuda/bin/ptxas'] if os.path.exists(p)), None)
reps = int(os.environ.get('REPS', '5'))
files = sys.argv[1:]
base = ['--gpu-architecture=sm_90a', '--std=c++17', '--ptxas-options=-v', '-lineinfo', '--no-cache', '--minimal']
srcs = {f: open(f).read() for f in files}
R = {f: {'tot': [], 'fe': [], 'nv': [], 'px': [], 'pt': []} for f in files}
info = {}
for f, s in srcs.items():
    comp(s, base)
    _, _, _, ptx = comp(s, ['--gpu-architecture=compute_90a', '--std=c++17', '-lineinfo', '--no-cache', '--minimal'])
    open(f'/tmp/cs_{os.path.basename(f)}.ptx', 'w').write(ptx)
    info[f] = ptx.count('\n')
tf = '/tmp/cs_time.csv'
for i in range(reps):
    for f, s in srcs.items():
        if os.path.exists(tf): os.remove(tf)
        r, dt, log, _ = comp(s, base + [f'--time={tf}'])
        assert r == 0, log[:500]
        ph = {}
        for line in open(tf).read().split('\n')[1:]:
            p = [x.strip() for x in line.split(',')]
            if len(p) == 4: ph[p[1]] = float(p[2])
        R[f]['tot'].append(dt); R[f]['fe'].append(ph.get('CUDA C++ Frontend', 0)); R[f]['nv'].append(ph.get('NVVM Optimizer', 0)); R[f]['px'].append(ph.get('PTX Translation', 0))
        R[f]['regs'] = re.findall(r'Used (\d+) registers', log)
        if ptxas:
            t = time.perf_counter(); subprocess.run([ptxas, '-arch=sm_90a', '-O3', f'/tmp/cs_{os.path.basename(f)}.ptx', '-o', '/tmp/cs.cubin'], check=True); R[f]['pt'].append((time.perf_counter() - t) * 1e3)
m = statistics.median
for f in files:
    x = R[f]
    print(f"{os.path.basename(f):26s} nvrtc min {min(x['tot']):4.0f} med {m(x['tot']):4.0f} | frontend {m(x['fe']):3.0f} nvvm {m(x['nv']):4.0f} ptxas {m(x['px']):4.0f} | ptxas alone min {min(x['pt']) if x['pt'] else 0:4.0f} med {m(x['pt']) if x['pt'] else 0:4.0f} | regs {x['regs']} ptx lines {info[f]}", flush=True)
