#!/usr/bin/env python3
"""Plays systemd's side of a Type=notify service with an fd store, for tests (no systemd in CI).

    systemd_emulator.py --events FILE [--fdstore-max N] [--watchdog-usec U] [--restart-gate PATH]
                        [--restarts N] [--deaf-until PATH] -- COMMAND...

What it does, as systemd (src/core/service.c, sd_notify(3), sd_listen_fds(3)) does:
  * a datagram NOTIFY_SOCKET (a path in a private directory, SO_PASSCRED on); with NotifyAccess=main a message is
    accepted only from the main pid (SCM_CREDENTIALS), others are recorded as "ignored" and their fds closed;
  * READY=1, STATUS=, STOPPING=1, WATCHDOG=1 recorded; FDSTORE=1 stores the message's fds (at most
    FileDescriptorStoreMax, the rest closed), each under the message's FDNAME= (default "stored"), an fd that is
    the same open file as a stored one (kcmp KCMP_FILE, as systemd's same_fd(); st_dev/st_ino where kcmp is
    unavailable) is dropped as a duplicate; FDPOLL=0 noted; FDSTOREREMOVE=1
    closes every stored fd named FDNAME=; a stored fd with FDPOLL on that reports POLLHUP/POLLERR is dropped;
  * the service runs with NOTIFY_SOCKET, FDSTORE (the max, as systemd 254+ exports it), WATCHDOG_USEC and
    WATCHDOG_PID; when it ends by a signal or a nonzero status (Restart=on-failure) it is started again, at most
    --restarts times, once --restart-gate exists (an exit code in --success-exit-status is no failure, as
    SuccessExitStatus=): fork, the stored fds dup2'ed to 3, 4, ... (without CLOEXEC), in the reverse order of their
    storing (systemd prepends each new entry to its list: LIST_PREPEND in service_add_fd_store),
    LISTEN_PID set to the child's own pid after the fork, LISTEN_FDS and LISTEN_FDNAMES (':'-joined), then execve;
  * SIGTERM to the emulator: SIGTERM to the service, wait, exit (the fd store is dropped with it);
  * --deaf-until PATH: the notify socket is not read until PATH exists, and its queue is full from the start (the
    emulator fills it with datagrams of its own before the service starts, recorded later as "ignored"): a systemd
    that stopped reading long ago, so the service's very first datagram gets EAGAIN.

Every event is one JSON line in --events: {"event": "spawn", "pid": P, "listen_fds": N, "names": [...]},
{"event": "notify", "pid": P, "fields": {...}, "fds": K}, {"event": "stored", "name": ..., "poll": bool},
{"event": "duplicate"|"removed"|"refused"|"ignored"|"dropped", ...}, {"event": "exit", "pid": P, "status": S,
"signal": G}. Standard library only (python3 >= 3.9).
"""
import argparse
import array
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import time

SCM_CREDENTIALS = 2


_KCMP = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)


def same_file(a, b):
    """Whether fds a and b are the same open file description, as systemd's same_fd() decides: kcmp(2) with
    KCMP_FILE. Two opens of one file (every CUDA shareable handle is an open of /dev/nvidiactl) are different
    entries; a dup of one is not."""
    if _KCMP is not None:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        pid = os.getpid()
        r = libc.syscall(_KCMP, pid, pid, 0, a, b)  # KCMP_FILE = 0
        if r >= 0:
            return r == 0
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


class Store:
    def __init__(self, maximum, log):
        self.entries = []  # [fd, name, poll]
        self.maximum = maximum
        self.log = log

    def add(self, fds, name, poll):
        for fd in fds:
            if any(same_file(e[0], fd) for e in self.entries):
                self.log({"event": "duplicate", "name": name})
                os.close(fd)
                continue
            if len(self.entries) >= self.maximum:
                self.log({"event": "refused", "name": name, "why": "FileDescriptorStoreMax=%d" % self.maximum})
                os.close(fd)
                continue
            # at the front, as systemd does (service_add_fd_store: LIST_PREPEND): a restart gets the fds in the
            # reverse order of their storing, and a daemon-reload, which stores them again, reverses that
            self.entries.insert(0, [fd, name, poll])
            self.log({"event": "stored", "name": name, "poll": poll})

    def remove(self, name):
        keep = []
        for e in self.entries:
            if e[1] == name:
                os.close(e[0])
                self.log({"event": "removed", "name": name})
            else:
                keep.append(e)
        self.entries = keep

    def prune(self):
        keep = []
        for e in self.entries:
            if e[2]:
                p = select.poll()
                p.register(e[0], select.POLLHUP | select.POLLERR)
                if any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in p.poll(0)):
                    os.close(e[0])
                    self.log({"event": "dropped", "name": e[1], "why": "POLLHUP/POLLERR"})
                    continue
            keep.append(e)
        self.entries = keep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", required=True)
    ap.add_argument("--fdstore-max", type=int, default=0)
    ap.add_argument("--watchdog-usec", type=int, default=0)
    ap.add_argument("--restart-gate")
    ap.add_argument("--restarts", type=int, default=1)
    ap.add_argument("--deaf-until")
    ap.add_argument("--success-exit-status", default="",
                    help="exit codes that are not a failure, as SuccessExitStatus= (e.g. 143, a JVM ended by SIGTERM)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    out = open(a.events, "a", buffering=1)

    def log(d):
        d["t"] = round(time.monotonic(), 3)
        out.write(json.dumps(d) + "\n")

    try:  # die with the test that started us (PR_SET_PDEATHSIG)
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    except Exception:
        pass

    private = tempfile.mkdtemp(prefix="notify-")
    path = os.path.join(private, "notify")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(path)
    ns.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    ns.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    store = Store(a.fdstore_max, log)
    state = {"main": 0, "stop": False}

    def spawn():
        store.prune()
        fds = [e[0] for e in store.entries]
        names = [e[1] for e in store.entries]
        env = dict(os.environ)
        env["NOTIFY_SOCKET"] = path
        if a.fdstore_max > 0:
            env["FDSTORE"] = str(a.fdstore_max)
        if a.watchdog_usec > 0:
            env["WATCHDOG_USEC"] = str(a.watchdog_usec)
        for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_PID"):
            env.pop(k, None)
        if fds:
            env["LISTEN_FDS"] = str(len(fds))
            env["LISTEN_FDNAMES"] = ":".join(names)
        pid = os.fork()
        if pid == 0:
            try:
                n = len(fds)
                # copies above the target range first, so that placing one at 3+i overwrites no fd still needed
                high = [fcntl.fcntl(f, fcntl.F_DUPFD, 3 + n) for f in fds]
                for i, f in enumerate(high):
                    os.dup2(f, 3 + i, inheritable=True)  # without CLOEXEC, as systemd passes them
                os.closerange(3 + n, 1 << 16)  # everything else (the copies, the store, the notify socket)
                me = os.getpid()
                if fds:
                    env["LISTEN_PID"] = str(me)  # after the fork, before the exec: the service's own pid
                if a.watchdog_usec > 0:
                    env["WATCHDOG_PID"] = str(me)
                os.execvpe(cmd[0], cmd, env)
            finally:
                os._exit(127)
        state["main"] = pid
        log({"event": "spawn", "pid": pid, "listen_fds": len(fds), "names": names})
        return pid

    def on_term(signum, frame):
        state["stop"] = True
        if state["main"]:
            try:
                os.kill(state["main"], signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    if a.deaf_until:
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        filler.setblocking(False)
        try:
            while True:
                filler.sendto(b"X_ENGRAM_FILLER=1", path)
        except BlockingIOError:
            pass
        filler.close()
    spawn()
    restarts = 0
    bufsize = 64 << 10
    fdspace = socket.CMSG_SPACE(253 * 4) + socket.CMSG_SPACE(12)
    while True:
        if a.deaf_until and not os.path.exists(a.deaf_until):
            time.sleep(0.05)  # not reading, as a systemd that stopped
            r = []
        else:
            try:
                r, _, _ = select.select([ns], [], [], 0.05)
            except InterruptedError:
                r = []
        if r:
            data, anc, flags, _ = ns.recvmsg(bufsize, fdspace, socket.MSG_CMSG_CLOEXEC)
            fds, sender = [], None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    arr = array.array("i")
                    arr.frombytes(cdata[: len(cdata) - (len(cdata) % arr.itemsize)])
                    fds.extend(arr)
                elif level == socket.SOL_SOCKET and typ == SCM_CREDENTIALS:
                    sender = struct.unpack("iII", cdata[:12])[0]
            fields = {}
            for line in data.decode("utf-8", "replace").split("\n"):
                if "=" in line:
                    k, v = line.split("=", 1)
                    fields[k] = v
            if sender != state["main"]:  # NotifyAccess=main
                log({"event": "ignored", "pid": sender, "fields": fields, "fds": len(fds)})
                for f in fds:
                    os.close(f)
                continue
            log({"event": "notify", "pid": sender, "fields": fields, "fds": len(fds),
                 "truncated": bool(flags & socket.MSG_CTRUNC)})
            if fields.get("FDSTOREREMOVE") == "1":
                store.remove(fields.get("FDNAME", ""))
            if fields.get("FDSTORE") == "1" and fds:
                store.add(fds, fields.get("FDNAME", "stored"), fields.get("FDPOLL") != "0")
            elif fds:
                for f in fds:
                    os.close(f)
        if state["main"]:
            pid, status = os.waitpid(state["main"], os.WNOHANG)
            if pid:
                sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
                log({"event": "exit", "pid": pid, "status": code, "signal": sig})
                state["main"] = 0
                clean = {0, -1} | {int(c) for c in a.success_exit_status.split()}
                # as systemd's Restart=on-failure: SIGTERM (with SIGHUP, SIGINT, SIGPIPE) is a clean death, a nonzero
                # exit is not unless SuccessExitStatus= lists it
                failed = (sig != 0 and sig not in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE)) \
                    or code not in clean
                if state["stop"] or not failed or restarts >= a.restarts:
                    break
                while a.restart_gate and not os.path.exists(a.restart_gate) and not state["stop"]:
                    time.sleep(0.01)
                if state["stop"]:
                    break
                restarts += 1
                spawn()
    log({"event": "end", "stored": [e[1] for e in store.entries]})
    os.unlink(path)
    os.rmdir(private)


if __name__ == "__main__":
    sys.exit(main())
