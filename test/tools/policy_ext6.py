"""A TCP SYN to DST:PORT from SRC behind IPv6 extension headers (hop-by-hop,
destination options), sent on IFACE to MAC; prints "synack" when the
service answers, else "none".

  python3 policy_ext6.py IFACE MAC SRC DST PORT [--plain]
"""
import sys

import time

from scapy.all import IPv6, AsyncSniffer, Ether, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, TCP, conf, sendp

conf.verb = 0
iface, mac, src, dst, port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
pkt = IPv6(src=src, dst=dst)
if "--plain" not in sys.argv:
    pkt = pkt / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()
sport = 40000 + (port % 1000)
pkt = Ether(dst=mac) / pkt / TCP(sport=sport, dport=port, flags="S", seq=1000)
# Sniffed, not matched by srp1: scapy does not pair a request behind extension headers with its answer.
sniffer = AsyncSniffer(iface=iface, filter=f"ip6 and tcp and src port {port} and dst port {sport}", count=1, timeout=1.5)
sniffer.start()
time.sleep(0.2)
sendp(pkt, iface=iface)
sniffer.join()
got = sniffer.results or []
ok = any(p.haslayer(TCP) and (int(p[TCP].flags) & 0x12) == 0x12 for p in got)
print("synack" if ok else "none")
