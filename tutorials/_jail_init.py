"""PID 1 of a grading jail (tutorials.sandbox): build its root, drop every capability, exec the program.

Runs as the namespace's root, with `python -I -S` (no site, no environment): the standard library only.
argv[1] is the JSON spec: binds (host paths shown read-only at their own path, or [host path, path in
the jail]), devices, argv, env, cwd.
"""
import ctypes
import errno
import fcntl
import json
import os
import resource
import socket
import struct
import sys
import tempfile

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
ST_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME,
            4096: MS_RELATIME}
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 24, 28, 38
SECURE_ALL = 0x3F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS locks: root gains no capability by exec
# Limits of every process of the jail: tasks (threads included: a rank of the coding labs uses a
# few dozen), private memory per process, file size, no core files.
LIMITS = {resource.RLIMIT_NPROC: 1024, resource.RLIMIT_DATA: 6 << 30, resource.RLIMIT_FSIZE: 1 << 30,
          resource.RLIMIT_CORE: 0}

libc = ctypes.CDLL(None, use_errno=True)


def fail(what):
    print(f"jail: {what}", file=sys.stderr)
    os._exit(125)


def mount(src, dst, fstype, flags, data=None):
    if libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), ctypes.c_ulong(flags),
                  data and data.encode()) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src} on {dst}: {os.strerror(e)}")


def bind_ro(src, dst):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | MS_REC)
    keep = sum(v for k, v in ST_FLAGS.items() if os.statvfs(src).f_flag & k) & ~MS_RDONLY
    mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | keep)


def loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifreq))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))  # SIOCSIFFLAGS, IFF_UP


def main():
    spec = json.loads(sys.argv[1])
    try:
        mount(None, "/", None, MS_REC | (1 << 18))  # MS_PRIVATE: nothing done here reaches the host
        root = spec.get("root") or tempfile.mkdtemp(prefix="jail-", dir="/tmp" if os.path.isdir("/tmp") else "/")
        mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=512m")
        for src in spec["binds"]:
            if isinstance(src, list):  # a host folder shown at another path
                bind_ro(src[0], root + src[1])
            elif os.path.exists(src):
                bind_ro(src, root + os.path.realpath(src))
                if os.path.islink(src) and not os.path.lexists(root + src):
                    os.symlink(os.readlink(src), root + src)
        os.makedirs(root + "/dev/shm")
        for dev in spec["devices"]:
            bind_ro("/dev/" + dev, root + "/dev/" + dev)
        for d in ("/tmp", "/home/student", "/proc"):
            os.makedirs(root + d, exist_ok=True)
        os.chmod(root + "/tmp", 0o1777)
        try:
            mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError:
            pass  # a host that overmounts parts of /proc: the program runs without it
        loopback_up()
        os.chroot(root)
        os.chdir(spec["cwd"])
        if libc.prctl(PR_SET_SECUREBITS, SECURE_ALL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECUREBITS)")
        for cap in range(64):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
                raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        for limit, value in LIMITS.items():
            soft, hard = resource.getrlimit(limit)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))
    except OSError as e:
        fail(f"could not be built: {e}")
    os.execve(spec["argv"][0], spec["argv"], spec["env"])


main()
