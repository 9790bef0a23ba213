#!/usr/bin/env python3
"""Runs a command under a seccomp filter that fails the NUMA policy calls with EPERM, as a container runtime's
default profile does for a container without CAP_SYS_NICE (Docker's gates mbind, set_mempolicy and get_mempolicy on
that capability). The two-node checks (scripts/numa/numa-guest-checks.sh) use it to show what `serve --numa 1` says
there, and that `--numa none` serves.

    seccomp-deny.py [--calls mbind,set_mempolicy,get_mempolicy,move_pages] -- COMMAND [ARGS...]

Sets no_new_privs, installs the filter (inherited by every thread and child), then execs COMMAND. x86-64 and
aarch64 (their syscall numbers differ); on any other architecture, or a kernel without seccomp, it exits 2 naming
why.
"""
import ctypes
import os
import platform
import struct
import sys

NUMBERS = {
    "x86_64": {"mbind": 237, "set_mempolicy": 238, "get_mempolicy": 239, "move_pages": 279},
    "aarch64": {"mbind": 235, "get_mempolicy": 236, "set_mempolicy": 237, "move_pages": 239},
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO_EPERM = 0x00050000 | 1
LD_W_ABS = 0x20
JEQ_K = 0x15
RET_K = 0x06


def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def main(argv):
    calls = ["mbind", "set_mempolicy", "get_mempolicy"]
    if argv[:1] == ["--calls"]:
        calls = argv[1].split(",")
        argv = argv[2:]
    if argv[:1] != ["--"] or len(argv) < 2:
        print(__doc__.strip().splitlines()[-6], file=sys.stderr)
        return 2
    command = argv[1:]
    arch = platform.machine()
    if arch not in NUMBERS:
        print(f"seccomp-deny: no syscall numbers for {arch}", file=sys.stderr)
        return 2
    unknown = [c for c in calls if c not in NUMBERS[arch]]
    if unknown:
        print(f"seccomp-deny: unknown calls {unknown}; known: {sorted(NUMBERS[arch])}", file=sys.stderr)
        return 2
    nrs = [NUMBERS[arch][c] for c in calls]
    # seccomp_data: nr @0, arch @4. Another architecture's calls are let through (the filter is not a sandbox).
    prog = [insn(LD_W_ABS, 0, 0, 4), insn(JEQ_K, 0, len(nrs) + 2, AUDIT_ARCH[arch]), insn(LD_W_ABS, 0, 0, 0)]
    for i, nr in enumerate(nrs):
        prog.append(insn(JEQ_K, len(nrs) - i, 0, nr))
    prog.append(insn(RET_K, 0, 0, RET_ALLOW))
    prog.append(insn(RET_K, 0, 0, RET_ERRNO_EPERM))
    prog.append(insn(RET_K, 0, 0, RET_ALLOW))
    filt = ctypes.create_string_buffer(b"".join(prog))
    fprog = struct.pack("HxxxxxxQ", len(prog), ctypes.addressof(filt))
    fbuf = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        print(f"seccomp-deny: prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 2
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fbuf), 0, 0) != 0:
        print(f"seccomp-deny: prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 2
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
