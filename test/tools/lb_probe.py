#!/usr/bin/env python3
"""Lab probe for the load balancer, run in the client namespace.

  lb_probe.py udp VIP PORT SPORT...   one datagram from each source port; prints JSON
                                       [{sport, backend, seen, from}] (from = reply source "ip:port")
  lb_probe.py udp1 VIP PORT SPORT...  the same, one try with a 0.5 s timeout
  lb_probe.py icmp6-to-vip IFACE ME VIP VPORT CPORT   packet too big to the VIP about a reply (scapy)
  lb_probe.py hostile IFACE VIP PORT   fragments, truncated headers, bad TCP flags (scapy)
"""
import json
import socket
import sys


def udp(vip, port, sports, tries=3, timeout=2.0):
    out = []
    for sp in sports:
        v6 = ":" in vip
        s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::" if v6 else "0.0.0.0", sp))
        s.settimeout(timeout)
        row = {"sport": sp, "backend": None, "seen": None, "from": None}
        for _ in range(tries):
            try:
                s.sendto(b"hello", (vip, port))
                data, addr = s.recvfrom(2048)
                name, seen = data.decode().split()
                src = f"[{addr[0]}]:{addr[1]}" if v6 else f"{addr[0]}:{addr[1]}"
                row = {"sport": sp, "backend": name, "seen": seen, "from": src}
                break
            except socket.timeout:
                continue
        s.close()
        out.append(row)
    print(json.dumps(out))


def refused(vip, port):
    """A connected UDP socket: an ICMP port unreachable that names our flow exactly raises ECONNREFUSED."""
    s = socket.socket(socket.AF_INET6 if ":" in vip else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    s.connect((vip, port))
    result = "timeout"
    for _ in range(3):
        try:
            s.send(b"hello")
            s.recv(2048)
            result = "answered"
            break
        except ConnectionRefusedError:
            result = "refused"
            break
        except socket.timeout:
            continue
    print(json.dumps({"result": result}))


def icmp_to_vip(iface, vip, vport, client_port):
    """Fragmentation needed, sent to the VIP, quoting a reply VIP:vport -> us:client_port."""
    from scapy.all import IP, ICMP, UDP, Ether, sendp, conf, get_if_addr  # noqa: E402
    from scapy.layers.l2 import getmacbyip
    import subprocess
    conf.verb = 0
    me = get_if_addr(iface)
    gw = json.loads(subprocess.run(["ip", "-j", "route", "get", vip], capture_output=True, text=True).stdout)[0].get("gateway", vip)
    quoted = IP(src=vip, dst=me) / UDP(sport=vport, dport=client_port) / b"12345678"
    sendp(Ether(dst=getmacbyip(gw)) / IP(dst=vip) / ICMP(type=3, code=4, nexthopmtu=1200) / bytes(quoted)[:28], iface=iface)
    print(json.dumps({"sent": 1}))


def icmp6_to_vip(iface, me, vip, vport, client_port):
    """Packet too big, sent to an IPv6 VIP, quoting a reply [VIP]:vport -> [me]:client_port."""
    from scapy.all import IPv6, ICMPv6PacketTooBig, UDP, Ether, sendp, conf  # noqa: E402
    import subprocess
    conf.verb = 0
    gw = json.loads(subprocess.run(["ip", "-6", "-j", "route", "get", vip], capture_output=True, text=True).stdout)[0].get("gateway", vip)
    # The kernel's neighbour entry (the flow's traffic made it); scapy's own IPv6 resolution needs routes it lacks here.
    neigh = json.loads(subprocess.run(["ip", "-6", "-j", "neigh", "show", gw], capture_output=True, text=True).stdout or "[]")
    mac = next((n["lladdr"] for n in neigh if "lladdr" in n), None)
    if mac is None:
        sys.exit(f"no neighbour entry for {gw}")
    quoted = IPv6(src=vip, dst=me) / UDP(sport=vport, dport=client_port) / b"12345678"
    sendp(Ether(dst=mac) / IPv6(src=me, dst=vip) / ICMPv6PacketTooBig(mtu=1280) / bytes(quoted), iface=iface)
    print(json.dumps({"sent": 1}))


def hostile(iface, vip, port):
    from scapy.all import IP, TCP, UDP, Ether, Raw, fragment, sendp, conf  # noqa: E402
    conf.verb = 0
    import subprocess
    gw = subprocess.run(["ip", "-j", "route", "get", vip], capture_output=True, text=True).stdout
    via = json.loads(gw)[0].get("gateway", vip)
    from scapy.layers.l2 import getmacbyip
    dst = getmacbyip(via)
    eth = Ether(dst=dst)
    frames = []
    # Fragments of a UDP datagram to the service.
    frames += [eth / f for f in fragment(IP(dst=vip) / UDP(sport=4000, dport=port) / Raw(b"x" * 3000), fragsize=1000)]
    # IP header claiming TCP, cut short of the TCP header (and of UDP's).
    frames.append(eth / IP(dst=vip, proto=6) / Raw(b"\x00\x50"))
    frames.append(eth / IP(dst=vip, proto=17) / Raw(b"\x00"))
    # Only an Ethernet header and a few bytes of IPv4.
    frames.append(Ether(dst=dst, type=0x0800) / Raw(b"\x45\x00"))
    # IHL larger than the packet.
    frames.append(eth / IP(dst=vip, ihl=15) / Raw(b"\x00" * 4))
    # Bad TCP flags: SYN+FIN+RST+URG, and nothing set.
    frames.append(eth / IP(dst=vip) / TCP(sport=4001, dport=port, flags="SFRU"))
    frames.append(eth / IP(dst=vip) / TCP(sport=4002, dport=port, flags=0))
    # ICMP errors quoting flows nobody tracks (to the VIP), and a truncated one.
    from scapy.all import ICMP
    frames.append(eth / IP(dst=vip) / ICMP(type=3, code=4) / bytes(IP(src=vip, dst="192.0.2.99") / UDP(sport=port, dport=9))[:28])
    frames.append(eth / IP(dst=vip) / ICMP(type=3, code=3) / b"\x45\x00")
    # Port 0 and an unknown port.
    frames.append(eth / IP(dst=vip) / TCP(sport=4003, dport=0, flags="S"))
    sendp(frames, iface=iface)
    print(json.dumps({"sent": len(frames)}))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "udp":
        udp(sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4:]])
    elif mode == "udp1":  # one try, 0.5 s: a flow expected to get no answer costs little
        udp(sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4:]], tries=1, timeout=0.5)
    elif mode == "refused":
        refused(sys.argv[2], int(sys.argv[3]))
    elif mode == "icmp-to-vip":
        icmp_to_vip(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "icmp6-to-vip":
        icmp6_to_vip(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    elif mode == "hostile":
        hostile(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(f"unknown mode {mode}")
