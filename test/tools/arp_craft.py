#!/usr/bin/python3
"""Send crafted (often malformed) ARP frames with scapy and report every ARP
reply seen for the target IP. An independent oracle for herald's responder:
none of herald's own packet code is used here.

usage: arp_craft.py IFACE TARGET_IP VARIANT [--count N] [--wait SECONDS]
                    [--interval SECONDS] [--spa IP] [--dst-mac MAC]
Prints one JSON line: {"variant", "sent", "replies": [{"mac", "dst", "tpa", "tha"}]}
"""
import argparse
import json
import sys
import time

from scapy.all import ARP, AsyncSniffer, Ether, Raw, conf, get_if_addr, get_if_hwaddr, sendp  # noqa: E402

conf.verb = 0


def patch(layer, offset, data):
    b = bytearray(bytes(layer))
    b[offset:offset + len(data)] = data
    return bytes(b)


def frame(variant, iface, target, spa, dst_mac):
    mac = get_if_hwaddr(iface)
    src_ip = spa if spa is not None else get_if_addr(iface)
    eth = Ether(src=mac, dst=dst_mac or "ff:ff:ff:ff:ff:ff", type=0x0806)
    arp = dict(hwtype=1, ptype=0x0800, hwlen=6, plen=4, op=1, hwsrc=mac, psrc=src_ip,
               hwdst="00:00:00:00:00:00", pdst=target)
    if variant == "valid":
        return eth / ARP(**arp)
    # Malformed headers are patched into a valid ARP body byte by byte, so
    # scapy's own field logic (which follows htype/ptype) cannot "fix" them.
    if variant == "wrong-htype":
        return eth / Raw(patch(ARP(**arp), 0, b"\x00\x06"))  # IEEE 802
    if variant == "wrong-ptype":
        return eth / Raw(patch(ARP(**arp), 2, b"\x86\xdd"))
    if variant == "wrong-hlen":
        return eth / Raw(patch(ARP(**arp), 4, b"\x08"))
    if variant == "wrong-plen":
        return eth / Raw(patch(ARP(**arp), 5, b"\x10"))
    if variant == "reply-opcode":
        arp["op"] = 2
        return eth / ARP(**arp)
    if variant == "truncated":
        return eth / Raw(bytes(ARP(**arp))[:20])  # the target address is cut off
    if variant == "foreign-unicast":
        return Ether(src=mac, dst="02:00:5e:10:00:99", type=0x0806) / ARP(**arp)
    # Requests from a source no reply can go to: the responder must stay silent.
    if variant == "mcast-eth-src":
        return Ether(src="01:00:5e:00:00:01", dst="ff:ff:ff:ff:ff:ff", type=0x0806) / ARP(**arp)
    if variant == "bcast-eth-src":
        return Ether(src="ff:ff:ff:ff:ff:ff", dst="ff:ff:ff:ff:ff:ff", type=0x0806) / ARP(**arp)
    if variant == "mcast-sha":
        arp["hwsrc"] = "01:00:5e:00:00:01"
        return eth / ARP(**arp)
    if variant == "probe":
        arp["psrc"] = "0.0.0.0"
        return eth / ARP(**arp)
    if variant == "conflict":
        # Another host claims the target IP as its own address (an announcement).
        arp["psrc"] = target
        return eth / ARP(**arp)
    if variant == "conflict-reply":
        arp.update(op=2, psrc=target, hwdst="ff:ff:ff:ff:ff:ff", pdst=target)
        return eth / ARP(**arp)
    raise SystemExit(f"unknown variant {variant}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("iface")
    ap.add_argument("target")
    ap.add_argument("variant")
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--wait", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--spa")
    ap.add_argument("--dst-mac")
    a = ap.parse_args()

    pkt = frame(a.variant, a.iface, a.target, a.spa, a.dst_mac)
    own = get_if_hwaddr(a.iface)
    sniffer = AsyncSniffer(iface=a.iface, filter="arp", store=True)
    sniffer.start()
    time.sleep(0.3)  # let the capture attach before the first frame leaves
    for _ in range(a.count):
        sendp(pkt, iface=a.iface)
        time.sleep(a.interval)
    time.sleep(a.wait)
    packets = sniffer.stop() or []
    replies = []
    for p in packets:
        if ARP in p and p[ARP].op == 2 and p[ARP].psrc == a.target and p[Ether].src.lower() != own.lower():
            replies.append({"mac": p[Ether].src.lower(), "dst": p[Ether].dst.lower(), "tpa": p[ARP].pdst,
                            "tha": p[ARP].hwdst.lower()})
    print(json.dumps({"variant": a.variant, "sent": a.count, "replies": replies}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
