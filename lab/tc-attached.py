#!/usr/bin/python3
"""What runs at an interface's tc hooks, read straight from the kernel
(independently of herald's code): the tcx programs in order, with their link
ids and names (BPF_PROG_QUERY on BPF_TCX_INGRESS/EGRESS), and the legacy
cls_bpf filters (tc -j filter show). bpftool 7.1 (Debian 12) lists neither
tcx programs per interface nor their order. Prints JSON.

usage: tc-attached.py IFNAME
"""
import ctypes, json, socket, subprocess, sys

SYS_BPF = 321
BPF_PROG_QUERY, BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD = 16, 13, 15
TCX = {'ingress': 46, 'egress': 47}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def bpf(cmd, attr):
    rc = libc.syscall(SYS_BPF, ctypes.c_int(cmd), ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr)))
    return rc, ctypes.get_errno()


def prog_name(prog_id):
    attr = (ctypes.c_uint8 * 128)()
    ctypes.c_uint32.from_buffer(attr, 0).value = prog_id
    fd, _ = bpf(BPF_PROG_GET_FD_BY_ID, attr)
    if fd < 0:
        return None
    info = (ctypes.c_uint8 * 256)()
    attr = (ctypes.c_uint8 * 128)()
    ctypes.c_uint32.from_buffer(attr, 0).value = fd
    ctypes.c_uint32.from_buffer(attr, 4).value = 256
    ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(info)
    rc, _ = bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    libc.close(fd)
    return bytes(info[64:80]).split(b'\0')[0].decode() if rc == 0 else None


def tcx(ifindex, attach_type):
    n = 64
    progs, links = (ctypes.c_uint32 * n)(), (ctypes.c_uint32 * n)()
    attr = (ctypes.c_uint8 * 128)()
    ctypes.c_uint32.from_buffer(attr, 0).value = ifindex
    ctypes.c_uint32.from_buffer(attr, 4).value = attach_type
    ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(progs)
    ctypes.c_uint32.from_buffer(attr, 24).value = n
    ctypes.c_uint64.from_buffer(attr, 40).value = ctypes.addressof(links)
    rc, err = bpf(BPF_PROG_QUERY, attr)
    if rc < 0:
        return {'error': err}
    count = ctypes.c_uint32.from_buffer(attr, 24).value
    return [{'prog_id': progs[i], 'link_id': links[i], 'name': prog_name(progs[i])} for i in range(min(count, n))]


def cls_bpf(ifname, direction):
    out = subprocess.run(['tc', '-j', 'filter', 'show', 'dev', ifname, direction], capture_output=True, text=True).stdout
    filters = json.loads(out or '[]')
    return [{'pref': f.get('pref'), 'prog_id': f['options']['prog']['id'], 'name': f['options']['prog'].get('name')}
            for f in filters if f.get('options', {}).get('prog')]


ifname = sys.argv[1]
ifindex = socket.if_nametoindex(ifname)
print(json.dumps({d: {'tcx': tcx(ifindex, TCX[d]), 'cls_bpf': cls_bpf(ifname, d)} for d in TCX}))
