#!/usr/bin/python3
"""Send crafted (often malformed) IPv6 Neighbor Solicitations with scapy and
report every Neighbor Advertisement seen for the target. An independent oracle
for herald's NDP responder: none of herald's own packet code is used here.

usage: ndp_craft.py IFACE TARGET_IP VARIANT --src IP [--count N] [--wait SECONDS]
                    [--interval SECONDS] [--dst-mac MAC]
Prints one JSON line: {"variant", "sent", "replies": [{...NA fields...}]}
"""
import argparse
import json
import time

from scapy.all import (AsyncSniffer, Ether, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr,  # noqa: E402
                       ICMPv6NDOptSrcLLAddr, IPv6, Raw, conf, get_if_hwaddr, in6_getnsma, in6_getnsmac,
                       inet_pton, inet_ntop, sendp)
import socket

conf.verb = 0


def nsma(target):
    """Solicited-node group and its MAC for a target."""
    group = inet_ntop(socket.AF_INET6, in6_getnsma(inet_pton(socket.AF_INET6, target)))
    return group, in6_getnsmac(inet_pton(socket.AF_INET6, target))


def frame(variant, iface, target, src, dst_mac):
    mac = get_if_hwaddr(iface)
    group, group_mac = nsma(target)
    eth = Ether(src=mac, dst=group_mac)
    ip = dict(src=src, dst=group, hlim=255)
    slla = ICMPv6NDOptSrcLLAddr(lladdr=mac)
    if variant == "valid":
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target) / slla
    if variant == "no-slla":  # answered to the frame's source MAC
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target)
    if variant == "unicast":  # NUD: to the target address and the owner's MAC
        return Ether(src=mac, dst=dst_mac) / IPv6(src=src, dst=target, hlim=255) / ICMPv6ND_NS(tgt=target) / slla
    if variant == "dad":  # RFC 4862 probe: unspecified source, no SLLA
        return eth / IPv6(src="::", dst=group, hlim=255) / ICMPv6ND_NS(tgt=target)
    if variant == "other-slla":  # SLLA differs from the frame source: the NA goes to the SLLA
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr="02:00:5e:10:00:77")
    # --- never answered ---
    if variant == "bad-checksum":
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target, cksum=0x1234) / slla
    if variant == "hop-limit-254":
        return eth / IPv6(src=src, dst=group, hlim=254) / ICMPv6ND_NS(tgt=target) / slla
    if variant == "code-1":
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target, code=1) / slla
    if variant == "option-length-0":
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=mac, len=0)
    if variant == "option-truncated":  # the option claims 16 bytes, 8 are there (lengths and checksum consistent)
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=mac, len=2)
    if variant == "truncated":  # the IPv6 payload length claims more than the frame carries
        full = eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target) / slla
        raw = bytes(full)
        return Raw(raw[:len(raw) - 8])
    if variant == "short":  # an ICMPv6 message shorter than an NS (20 bytes)
        body = bytes(ICMPv6ND_NS(tgt=target))[:20]
        return eth / IPv6(nh=58, **ip) / Raw(body)
    if variant == "multicast-target":
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt="ff02::1") / slla
    if variant == "wrong-group":  # to another address's solicited-node group
        other_group, other_mac = nsma("2001:db8:ffff::4242")
        return Ether(src=mac, dst=other_mac) / IPv6(src=src, dst=other_group, hlim=255) / ICMPv6ND_NS(tgt=target) / slla
    if variant == "dad-with-slla":  # RFC 4861 7.1.1: invalid
        return eth / IPv6(src="::", dst=group, hlim=255) / ICMPv6ND_NS(tgt=target) / slla
    if variant == "slla-length-2":
        return eth / IPv6(**ip) / ICMPv6ND_NS(tgt=target) / Raw(b"\x01\x02" + bytes.fromhex(mac.replace(":", "")) + bytes(8))
    if variant == "foreign-unicast":  # unicast to someone else's MAC
        return Ether(src=mac, dst="02:00:5e:10:00:99") / IPv6(src=src, dst=target, hlim=255) / ICMPv6ND_NS(tgt=target) / slla
    raise SystemExit(f"unknown variant {variant}")


def describe(p):
    na = p[ICMPv6ND_NA]
    raw = bytes(p[IPv6])
    recomputed = IPv6(raw)
    recomputed[ICMPv6ND_NA].cksum = None
    ok = bytes(IPv6(bytes(recomputed)))[40:] == raw[40:]
    tlla = p[ICMPv6NDOptDstLLAddr].lladdr if ICMPv6NDOptDstLLAddr in p else None
    return {
        "ethSrc": p[Ether].src, "ethDst": p[Ether].dst, "src": p[IPv6].src, "dst": p[IPv6].dst,
        "hlim": p[IPv6].hlim, "code": na.code, "R": na.R, "S": na.S, "O": na.O, "tgt": na.tgt,
        "tlla": tlla, "checksumOk": ok, "plen": p[IPv6].plen,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("iface")
    ap.add_argument("target")
    ap.add_argument("variant")
    ap.add_argument("--src", required=True)
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--wait", type=float, default=0.5)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--dst-mac")
    a = ap.parse_args()
    pkt = frame(a.variant, a.iface, a.target, a.src, a.dst_mac)
    sniffer = AsyncSniffer(iface=a.iface, filter="icmp6 and ip6[40] == 136", store=True)
    sniffer.start()
    time.sleep(0.3)
    sendp(pkt, iface=a.iface, count=a.count, inter=a.interval)
    time.sleep(a.wait)
    got = sniffer.stop() or []
    replies = [describe(p) for p in got if ICMPv6ND_NA in p and p[ICMPv6ND_NA].tgt == a.target]
    print(json.dumps({"variant": a.variant, "sent": a.count, "replies": replies}))


if __name__ == "__main__":
    main()
