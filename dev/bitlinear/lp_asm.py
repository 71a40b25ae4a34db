"""What lavapipe made of a kernel: the x86 code of every pipeline compiled into a fresh Mesa shader
cache, its instruction mix and that of its biggest loops (objdump and zstd needed).

    MESA_SHADER_CACHE_DIR=/tmp/c python dev/bitlinear/tile_tune.py --fmt I2_S --steps q --trials 1 ...
    python dev/bitlinear/lp_asm.py /tmp/c [--loops 4] [--save DIR]

llvmpipe caches each compute shader's object code (an ELF, zstd-compressed after the cache header);
this prints, per cached shader: instructions in all, multiplies / adds (vmulps / vaddps: Mesa 22.3's
lavapipe emits no fused fma), vblendvps (writes of loop-carried values, masked by the execution
mask), stack loads / stores (spills), and the same for the largest loop bodies (by backward jump).
--save keeps the disassembly (NAME.s) for reading.
"""
import argparse, glob, os, re, subprocess
from collections import Counter


def objects(cache):
    for f in sorted(glob.glob(os.path.join(cache, "**", "*"), recursive=True), key=os.path.getmtime):
        if not os.path.isfile(f) or os.path.getsize(f) < 2000 or os.path.basename(f) == "index":
            continue
        d = open(f, "rb").read()
        i = d.find(b"\x28\xb5\x2f\xfd")                   # zstd frame
        if i < 0:
            continue
        b = subprocess.run(["zstd", "-d", "-c"], input=d[i:], capture_output=True).stdout
        j = b.find(b"\x7fELF")
        if j >= 0:
            yield os.path.basename(f)[:12], b[j:]


def stats(ins):
    c = Counter(op for _, op, _ in ins)
    mem = sum("(%rsp)" in a for _, _, a in ins)
    return (f"{len(ins)} ins, vmulps {c['vmulps']}, vaddps {c['vaddps']}, vblendvps {c['vblendvps']}, "
            f"stack operands {mem}, vmovaps {c['vmovaps']} vmovdqa {c['vmovdqa']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cache")
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--save")
    a = ap.parse_args()
    for name, obj in objects(a.cache):
        path = f"/tmp/lp_asm_{name}.o"
        open(path, "wb").write(obj)
        text = subprocess.run(["objdump", "-d", path], capture_output=True, text=True).stdout
        if a.save:
            os.makedirs(a.save, exist_ok=True)
            open(os.path.join(a.save, name + ".s"), "w").write(text)
        ins = []
        for line in text.splitlines():
            m = re.match(r"\s*([0-9a-f]+):\t[0-9a-f ]+\t(\S+)\s*(.*)", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
        at = {addr: i for i, (addr, _, _) in enumerate(ins)}
        loops = []
        for i, (addr, op, arg) in enumerate(ins):
            m = re.match(r"([0-9a-f]+)", arg) if op.startswith("j") else None
            if m and int(m.group(1), 16) < addr and int(m.group(1), 16) in at:
                loops.append((at[int(m.group(1), 16)], i))
        print(f"{name}: {stats(ins)}")
        for s, e in sorted(loops, key=lambda x: x[0] - x[1])[:a.loops]:
            print(f"    loop at {ins[s][0]:x}: {stats(ins[s:e + 1])}")


main()
