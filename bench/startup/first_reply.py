#!/usr/bin/python3
"""Wait for the first ARP reply for an IP: a broadcast ARP request every
INTERVAL_MS over plain AF_PACKET, replies read with select() (no busy loop,
so the probe does not compete with the agent for the CPU it measures).

usage: first_reply.py IFACE SRC_IP TARGET_IP INTERVAL_MS TIMEOUT_S
Prints "ready" once the socket is bound, then one JSON line:
{"replyAt": epoch seconds of the first reply, "requests": n} or {"timeout": true}.
"""
import json
import select
import socket
import sys
import time


def main():
    iface, src, target, interval_ms, timeout_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
    s.bind((iface, 0x0806))
    mac = s.getsockname()[4][:6]
    tpa = socket.inet_aton(target)
    request = b"\xff" * 6 + mac + b"\x08\x06" + b"\x00\x01\x08\x00\x06\x04\x00\x01" + mac + socket.inet_aton(src) + b"\x00" * 6 + tpa
    print("ready", flush=True)
    end = time.monotonic() + timeout_s
    sent = 0
    next_send = time.monotonic()
    while time.monotonic() < end:
        now = time.monotonic()
        if now >= next_send:
            s.send(request)
            sent += 1
            next_send = now + interval_ms / 1000
        ready, _, _ = select.select([s], [], [], max(0.0, next_send - time.monotonic()))
        if not ready:
            continue
        frame, addr = s.recvfrom(2048)
        if addr[2] == socket.PACKET_OUTGOING or len(frame) < 42:
            continue
        # ARP reply (op 2) whose sender protocol address is the target.
        if frame[12:14] == b"\x08\x06" and frame[20:22] == b"\x00\x02" and frame[28:32] == tpa:
            print(json.dumps({"replyAt": time.time(), "requests": sent}), flush=True)
            return
    print(json.dumps({"timeout": True, "requests": sent}), flush=True)


if __name__ == "__main__":
    main()
