import numpy as np, time
def t(name, f, n=40):
    for _ in range(3): f()
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    print(f"{name:28s} {np.median(ts)*1e3:7.2f} ms")
rng=np.random.default_rng(0)
L=622; shifts=[0,1,2,26,27,28,52,53,54]
w2t=np.ascontiguousarray(rng.standard_normal((32,144)).astype(np.float32).T)  # (144, 32)
gb=rng.standard_normal((32,64*L)).astype(np.float32)
cgbuf=np.empty((144,64*L),np.float32)
def plain():
    np.matmul(w2t, gb, out=cgbuf)
    cg=cgbuf.reshape(16,9,64,L)
    y=np.zeros((16,64,676),np.float32)
    for j,sh in enumerate(shifts): y[:,:,sh:sh+L]+=cg[:,j]
    return y
def blocked(cb=2):
    y=np.zeros((16,64,676),np.float32)
    for c0 in range(0,16,cb):
        blk=cgbuf[:cb*9]
        np.matmul(w2t[c0*9:(c0+cb)*9], gb, out=blk)
        cg=blk.reshape(cb,9,64,L)
        yb=y[c0:c0+cb]
        for j,sh in enumerate(shifts): yb[:,:,sh:sh+L]+=cg[:,j]
    return y
np.testing.assert_allclose(plain(), blocked(), rtol=1e-5, atol=1e-4)
for r in range(2):
    t("plain", plain); t("blocked 1", lambda: blocked(1)); t("blocked 2", lambda: blocked(2)); t("blocked 4", lambda: blocked(4))
