#!/usr/bin/env python3
"""Decode time of the same JPEGs through two libjpeg-turbo versions, one thread each, in one process:
the system's TurboJPEG library (ctypes, tjDecompress2; Debian 12 ships 2.1.5) and the 3.x built into the simplejpeg
wheel (`pip install simplejpeg`). Whole-image RGB decode, accurate DCT, smooth upsampling in both; the pixels are
compared too. Prints ms per image, MB/s of JPEG and the ratio.

    python3 scripts/probes/turbojpeg_versions.py DIR [--lib libturbojpeg.so.0] [--repeat 3]
"""
import argparse
import ctypes
import glob
import os
import time

import numpy as np
import simplejpeg

TJPF_RGB = 0


def system_decoder(lib_name):
    lib = ctypes.CDLL(lib_name)
    lib.tjInitDecompress.restype = ctypes.c_void_p
    lib.tjDecompressHeader3.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong] + [
        ctypes.POINTER(ctypes.c_int)] * 4
    lib.tjDecompress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.tjGetErrorStr2.restype = ctypes.c_char_p
    lib.tjGetErrorStr2.argtypes = [ctypes.c_void_p]
    handle = lib.tjInitDecompress()

    def decode(data):
        w, h, sub, cs = (ctypes.c_int() for _ in range(4))
        if lib.tjDecompressHeader3(handle, data, len(data), ctypes.byref(w), ctypes.byref(h), ctypes.byref(sub),
                                   ctypes.byref(cs)) != 0:
            raise RuntimeError(lib.tjGetErrorStr2(handle).decode())
        out = np.empty((h.value, w.value, 3), np.uint8)
        if lib.tjDecompress2(handle, data, len(data), out.ctypes.data, w.value, 0, h.value, TJPF_RGB, 0) != 0:
            raise RuntimeError(lib.tjGetErrorStr2(handle).decode())
        return out

    return decode


def wheel_decoder(data):
    return simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False)


def time_per_image(decode, blobs, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for b in blobs:
            decode(b)
        best = min(best, time.perf_counter() - t)
    return best / len(blobs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--lib", default="libturbojpeg.so.0")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.dir, "**", "*.jpg"), recursive=True))
    if not files:
        raise SystemExit(f"turbojpeg_versions: no .jpg under {a.dir}")
    blobs = [open(f, "rb").read() for f in files]
    system = system_decoder(a.lib)
    differ = sum(int(not np.array_equal(system(b), wheel_decoder(b))) for b in blobs)
    mb = sum(map(len, blobs)) / len(blobs) / 1e6
    t_sys = time_per_image(system, blobs, a.repeat)
    t_whl = time_per_image(wheel_decoder, blobs, a.repeat)
    print(f"{len(blobs)} JPEGs, {mb * 1e3:.1f} KB mean; pixels differ in {differ}")
    print(f"system {a.lib}: {t_sys * 1e3:.3f} ms/image ({mb / t_sys:.1f} MB/s)")
    print(f"simplejpeg {simplejpeg.__version__} (libjpeg-turbo 3.x): {t_whl * 1e3:.3f} ms/image ({mb / t_whl:.1f} MB/s)")
    print(f"3.x / system speed: {t_sys / t_whl:.3f}x")


if __name__ == "__main__":
    main()
