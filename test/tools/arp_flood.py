#!/usr/bin/python3
"""Flood a segment with gratuitous ARP claiming an IP for this host's MAC:
COUNT frames spread evenly over SECONDS, alternating the request form (sender
= target = the IP) and the broadcast reply form. Plain AF_PACKET (no scapy), so
the rate is not limited by the tool.

usage: arp_flood.py IFACE IP COUNT SECONDS
Prints one JSON line: {"sent", "elapsed"} (seconds from first to last frame).
"""
import json
import socket
import sys
import time


def frames(mac, ip):
    bcast = b"\xff" * 6
    hdr = bcast + mac + b"\x08\x06" + b"\x00\x01\x08\x00\x06\x04"
    request = hdr + b"\x00\x01" + mac + ip + b"\x00" * 6 + ip
    reply = hdr + b"\x00\x02" + mac + ip + bcast + ip
    return request, reply


def main():
    iface, ip_text, count, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    mac = s.getsockname()[4][:6]
    pair = frames(mac, socket.inet_aton(ip_text))
    start = time.monotonic()
    last = start
    for i in range(count):
        due = start + seconds * i / max(count - 1, 1)
        while time.monotonic() < due:
            pass
        s.send(pair[i % 2])
        last = time.monotonic()
    print(json.dumps({"sent": count, "elapsed": last - start}))


if __name__ == "__main__":
    main()
