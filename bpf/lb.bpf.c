// SPDX-License-Identifier: GPL-2.0
/*
 * herald L4 load balancer (issue 12): TCP and UDP to a service (VIP, port,
 * protocol) are spread over backends with Maglev (or random / round robin),
 * tracked per connection, DNATed at tc ingress of the announcing interface and
 * reverse-NATed at tc egress of the same interface, so the client only ever
 * sees VIP:port.
 *
 *   ingress (prio 3, after the L2 responder at prio 1 and the service policy at 2):
 *     service lookup → CT_SERVICE entry (client→VIP) → backend (Maglev on miss)
 *     → CT_EGRESS entry (client→backend, holds VIP:port for the reply)
 *     → DNAT → bpf_fib_lookup + bpf_redirect / bpf_redirect_neigh (else: kernel routing)
 *   egress (prio 3) of the announcing interface:
 *     reply tuple reversed → CT_EGRESS entry → SNAT source back to VIP:port
 *
 * IPv6 services take the same path with 16-byte addresses (lb6_services,
 * ct6; see lb6_ingress below), in every mode (DNAT, SNAT, DSR).
 * The ingress program is split into subprograms (lb4_ingress, lb6_ingress and
 * the SNAT / ICMP paths they hand back to herald_lb_ingress): each has its own
 * stack frame, and the verifier's 512 bytes bound the deepest call chain.
 * Anything that is not ours passes untouched (TC_ACT_UNSPEC). IPv4 fragments
 * sent to a service are dropped and counted (a later fragment carries no ports).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define PASS TC_ACT_UNSPEC
/* From linux/icmp.h, which drags in libc headers unusable for -target bpf. */
#define ICMP_DEST_UNREACH 3
#define ICMP_TIME_EXCEEDED 11
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__u32 rest;
};
#define AF_INET_ 2
#define AF_INET6_ 10
#define NEXTHDR_FRAGMENT_ 44
#define IP_MF_ 0x2000
#define IP_OFFSET_ 0x1fff

/* Shared with src/datapath/lb/layout.ts: keep in sync. */
struct lb4_key {
	__be32 vip;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct lb6_key {
	__u8 vip[16];
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct lb_service {
	__u32 id;       /* key of lb_maglev */
	__u16 backends; /* active backends in the table (0: drop) */
	__u16 flags;
	__u32 affinity_timeout_s; /* sessionAffinity ClientIP: seconds; 0 = off */
	__u32 rr_next; /* round robin: the next slot (the datapath counts; a rewrite restarts it) */
};

struct lb_backend {
	__u8 addr[16]; /* IPv4 in the first 4 bytes, network order */
	__be16 port;
	__u8 family; /* 4 or 6 */
	__u8 flags;  /* LB_BACKEND_F_* */
	__u32 pad;
};

#define LB_BACKEND_F_TERMINATING 1

enum ct_dir {
	CT_SERVICE = 1, /* client → VIP (before DNAT): which backend */
	CT_EGRESS = 2,  /* client → backend (after DNAT): nat = VIP:port for replies */
	CT_SNAT = 3,    /* SNAT services: backend:bport → node:port (the reply as it arrives): nat = client:port */
};

#define LB_SVC_F_SNAT 1
#define LB_SVC_F_DSR 2 /* direct server return: only the MAC changes; the backend holds the VIP */
/* Backend selection other than Maglev: the service's table then holds its active backends
 * in slots 0..backends-1, and a new flow takes slot random % backends or rr_next++ % backends. */
#define LB_SVC_F_RANDOM 4
#define LB_SVC_F_RR 8

struct ct_key4 {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 dir; /* enum ct_dir */
	__u16 pad;
};

struct ct_key6 {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 dir;
	__u16 pad;
};

#define CT_F_SYN_SEEN 1
#define CT_F_ESTABLISHED 2 /* a reply was seen */
#define CT_F_TX_CLOSING 4  /* FIN/RST from the client */
#define CT_F_RX_CLOSING 8  /* FIN/RST from the backend */
#define CT_F_SEEN_NON_SYN 16

struct ct_entry {
	__u64 expires_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 packets_fwd;
	__u64 bytes_fwd;
	__u64 packets_rev;
	__u64 bytes_rev;
	__u32 backend_id;
	__u32 service_id;
	__u8 nat_addr[16]; /* CT_EGRESS: the VIP; CT_SERVICE: the backend */
	__be16 nat_port;
	__u16 flags; /* CT_F_* */
	__u32 created_s; /* bpf_ktime_get_ns() / 1e9 at creation */
	__be16 snat_port; /* CT_EGRESS of an SNAT service: the node's port toward the backend */
	__u16 pad2;
	__u32 pad3;
};

enum lb_config_slot {
	CFG_TCP_SYN_NS = 0,
	CFG_TCP_ESTABLISHED_NS = 1,
	CFG_TCP_CLOSING_NS = 2,
	CFG_NON_TCP_NS = 3,
	CFG_MAGLEV_M = 4,
	CFG_SNAT_ADDR4 = 5, /* the node's IPv4 for SNAT services (network order in the low 4 bytes); 0 = none */
	CFG_SNAT_ADDR6_LO = 6, /* the node's IPv6 for SNAT services: bytes 0..7 */
	CFG_SNAT_ADDR6_HI = 7, /* bytes 8..15 (both 0: none) */
	CFG_SNAT_PORT_MIN = 8, /* SNAT source ports: [min, max] (0: 32768 and 60999) */
	CFG_SNAT_PORT_MAX = 9,
	CFG_SLOTS = 10,
};

enum lb_stat {
	ST_FORWARDED = 0,
	ST_REVNAT = 1,
	ST_NO_BACKEND = 2,
	ST_FRAGMENT = 3,
	ST_TRUNCATED = 4,
	ST_FIB_PASS = 5,
	ST_CT_CREATED = 6,
	ST_CT_FULL = 7,
	ST_TTL = 8,
	ST_ICMP_XLATE = 9, /* ICMP errors of tracked flows translated */
	/* Entries this program deleted (a flow whose backend is gone). With ct_created,
	 * the GC's deletions (ST_CT_USER_DELETED, written by the agent) and the live
	 * count, the LRU's evictions follow: created - deleted - user_deleted - live. */
	ST_CT_DELETED = 10,
	ST_CT_USER_DELETED = 11, /* written by user space only (slot of CPU 0) */
	ST_SNAT_EXHAUSTED = 12, /* new SNAT connections dropped: every probed node port toward the backend was taken */
	ST_XDP_FORWARDED = 13, /* of ST_FORWARDED: packets the XDP program DNATed and sent on itself (XDP_TX / redirect) */
	ST_XDP_PASS = 14, /* service packets XDP handed to tc unchanged: no usable FIB answer or target not in lb_xdp_targets */
	ST_SLOTS = 15,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb4_key);
	__type(value, struct lb_service);
	__uint(max_entries, 65536);
} lb4_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb6_key);
	__type(value, struct lb_service);
	__uint(max_entries, 65536);
} lb6_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct lb_backend);
	__uint(max_entries, 65536);
} lb_backends SEC(".maps");

/* service id → Maglev table (ARRAY of backend ids, size M prime, set at load). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 4096);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__type(key, __u32);
		__type(value, __u32);
		__uint(max_entries, 16381);
	});
} lb_maglev SEC(".maps");

/* sessionAffinity: ClientIP — the backend a client last got for a service. */
struct affinity_key4 {
	__be32 client;
	__u32 service_id;
};

struct affinity_entry {
	__u32 backend_id;
	__u32 pad;
	__u64 last_used_ns; /* CLOCK_MONOTONIC */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct affinity_key4);
	__type(value, struct affinity_entry);
	__uint(max_entries, 65536);
} lb4_affinity SEC(".maps");

struct affinity_key6 {
	__u8 client[16];
	__u32 service_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct affinity_key6);
	__type(value, struct affinity_entry);
	__uint(max_entries, 65536);
} lb6_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct_key4);
	__type(value, struct ct_entry);
	__uint(max_entries, 262144); /* overridden at load time */
} ct4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct_key6);
	__type(value, struct ct_entry);
	__uint(max_entries, 262144); /* overridden at load time */
} ct6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, CFG_SLOTS);
} lb_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, ST_SLOTS);
} lb_stats SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&lb_stats, &slot);
	if (v)
		*v += 1;
}

/* One connection entry being built, per CPU: off the 512-byte stack (the IPv6 paths need the room). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct ct_entry);
	__uint(max_entries, 1);
} ct_scratch SEC(".maps");

/* A new entry in the per-CPU scratch slot (0 if the slot cannot be had): written whole, then copied by the map update. */
static __always_inline struct ct_entry *ct_build(__u32 backend_id, __u32 service_id, const void *nat_addr16, __be16 nat_port, __u16 flags,
						 __u64 packets, __u64 bytes, __u64 now, __u64 expires, __be16 snat_port)
{
	__u32 zero = 0;
	struct ct_entry *e = bpf_map_lookup_elem(&ct_scratch, &zero);
	if (!e)
		return 0;
	__builtin_memset(e, 0, sizeof(*e));
	e->backend_id = backend_id;
	e->service_id = service_id;
	__builtin_memcpy(e->nat_addr, nat_addr16, 16);
	e->nat_port = nat_port;
	e->flags = flags;
	e->packets_fwd = packets;
	e->bytes_fwd = bytes;
	e->created_s = (__u32)(now / 1000000000ULL);
	e->expires_ns = expires;
	e->snat_port = snat_port;
	return e;
}

static __always_inline __u64 cfg(__u32 slot, __u64 def)
{
	__u64 *v = bpf_map_lookup_elem(&lb_config, &slot);
	return (v && *v) ? *v : def;
}

/*
 * Creates a connection entry (BPF_NOEXIST): counted in ct_created when it is
 * new, so that every entry the LRU holds or evicted was counted once. Another
 * CPU creating the same flow first (EEXIST) is no failure; anything else is
 * counted in ct_full. Returns 0 when the entry exists afterwards.
 */
static __always_inline int ct_create(void *map, void *key, struct ct_entry *e)
{
	long rc = bpf_map_update_elem(map, key, e, BPF_NOEXIST);
	if (rc == 0) {
		count(ST_CT_CREATED);
		return 0;
	}
	if (rc == -17 /* EEXIST */)
		return 0;
	count(ST_CT_FULL);
	return -1;
}

static __always_inline void ct_delete(void *map, void *key)
{
	if (bpf_map_delete_elem(map, key) == 0)
		count(ST_CT_DELETED);
}

static __always_inline __u32 rotl(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = rotl(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = rotl(h, 13);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 flow_hash4(__be32 saddr, __be32 daddr, __be16 sport, __be16 dport, __u8 proto)
{
	__u32 h = 0x48524c42; /* "HRLB" */
	h = mix(h, saddr);
	h = mix(h, daddr);
	h = mix(h, ((__u32)sport << 16) | dport);
	h = mix(h, proto);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* Lifetime of an entry in its current state (settings from lb_config). */
static __always_inline __u64 lifetime(__u8 proto, __u16 flags)
{
	if (proto != IPPROTO_TCP)
		return cfg(CFG_NON_TCP_NS, 60ULL * 1000000000ULL);
	if ((flags & (CT_F_TX_CLOSING | CT_F_RX_CLOSING)) == (CT_F_TX_CLOSING | CT_F_RX_CLOSING))
		return cfg(CFG_TCP_CLOSING_NS, 10ULL * 1000000000ULL);
	if (flags & CT_F_ESTABLISHED)
		return cfg(CFG_TCP_ESTABLISHED_NS, 21600ULL * 1000000000ULL);
	return cfg(CFG_TCP_SYN_NS, 60ULL * 1000000000ULL);
}

/* TCP flag byte of the header (offset 13). */
static __always_inline __u16 tcp_flags_to_ct(__u8 tf, int reply)
{
	__u16 f = 0;
	if (tf & 0x02) /* SYN */
		f |= CT_F_SYN_SEEN;
	else
		f |= CT_F_SEEN_NON_SYN;
	if (tf & 0x05) /* FIN | RST */
		f |= reply ? CT_F_RX_CLOSING : CT_F_TX_CLOSING;
	if (tf & 0x04) /* RST closes both ways */
		f |= CT_F_RX_CLOSING | CT_F_TX_CLOSING;
	if (reply)
		f |= CT_F_ESTABLISHED;
	return f;
}

/* A reply on a tracked connection (e: its client → backend entry): the TCP
 * state, the lifetime and the reverse counters; returns the new expiry. */
static __always_inline __u64 ct_touch_reply(struct ct_entry *e, __u8 proto, __u8 tcpflags, __u32 len)
{
	__u16 f = e->flags;
	if (proto == IPPROTO_TCP)
		f |= tcp_flags_to_ct(tcpflags, 1);
	e->flags = f;
	__u64 exp = bpf_ktime_get_ns() + lifetime(proto, f);
	e->expires_ns = exp;
	__sync_fetch_and_add(&e->packets_rev, 1);
	__sync_fetch_and_add(&e->bytes_rev, len);
	return exp;
}

struct l4_info {
	__u32 l4off;  /* offset of the TCP/UDP header */
	__u32 csumoff; /* offset of its checksum */
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 tcpflags;
};

/* Parses Ethernet + IPv4 + TCP/UDP ports. 0: ok, 1: not ours, 2: fragment, 3: truncated. */
/* The TCP or UDP header at `off`, either family: ports, TCP flags and where the checksum sits (3: truncated). */
static __always_inline int parse_ports(void *data, void *data_end, __u32 off, __u8 proto, struct l4_info *l4)
{
	l4->l4off = off;
	l4->proto = proto;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = data + off;
		if ((void *)(th + 1) > data_end)
			return 3;
		l4->sport = th->source;
		l4->dport = th->dest;
		l4->tcpflags = ((__u8 *)th)[13];
		l4->csumoff = off + offsetof(struct tcphdr, check);
	} else {
		struct udphdr *uh = data + off;
		if ((void *)(uh + 1) > data_end)
			return 3;
		l4->sport = uh->source;
		l4->dport = uh->dest;
		l4->tcpflags = 0;
		l4->csumoff = off + offsetof(struct udphdr, check);
	}
	return 0;
}

static __always_inline int parse4(struct __sk_buff *skb, struct iphdr **ipp, struct l4_info *l4)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return 1;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return 1;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return 3;
	if (ip->version != 4 || ip->ihl < 5)
		return 3;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return 1;
	*ipp = ip;
	if (ip->frag_off & bpf_htons(IP_MF_ | IP_OFFSET_))
		return 2;
	__u32 ihl = (ip->ihl & 0xf) * 4;
	return parse_ports(data, data_end, ETH_HLEN + ihl, ip->protocol, l4);
}

#define IP_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define IP_SRC_OFF (ETH_HLEN + offsetof(struct iphdr, saddr))
#define IP_DST_OFF (ETH_HLEN + offsetof(struct iphdr, daddr))

/* Rewrites one address and one port (source or destination), fixing both checksums. */
static __always_inline int rewrite4(struct __sk_buff *skb, struct l4_info *l4, int dst, __be32 old_ip, __be32 new_ip,
				    __be16 old_port, __be16 new_port)
{
	__u64 l4flags = l4->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 port_off = l4->l4off + (dst ? 2 : 0); /* tcp/udp: source at 0, dest at 2 */
	if (bpf_l4_csum_replace(skb, l4->csumoff, old_ip, new_ip, l4flags | BPF_F_PSEUDO_HDR | 4) < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, l4->csumoff, old_port, new_port, l4flags | 2) < 0)
		return -1;
	if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_ip, new_ip, 4) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, dst ? IP_DST_OFF : IP_SRC_OFF, &new_ip, 4, 0) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, port_off, &new_port, 2, 0) < 0)
		return -1;
	return 0;
}

static __always_inline __u32 maglev_pick(__u32 service_id, __u32 hash)
{
	void *table = bpf_map_lookup_elem(&lb_maglev, &service_id);
	if (!table)
		return 0;
	__u32 m = (__u32)cfg(CFG_MAGLEV_M, 16381);
	if (m == 0)
		return 0;
	__u32 idx = hash % m;
	__u32 *id = bpf_map_lookup_elem(table, &idx);
	return id ? *id : 0;
}

/*
 * A new flow's backend by the service's algorithm: Maglev (the flow's hash; the
 * same flow, the same backend), random, or round robin. For the last two the
 * table holds the active backends in slots 0..backends-1.
 */
static __always_inline __u32 pick_backend(struct lb_service *svc, __u32 service_id, __u32 hash)
{
	if (!(svc->flags & (LB_SVC_F_RANDOM | LB_SVC_F_RR)))
		return maglev_pick(service_id, hash);
	__u32 n = svc->backends;
	if (n == 0)
		return 0;
	__u32 i;
	if (svc->flags & LB_SVC_F_RR) {
		/* Read, then count atomically (a fetching add needs BPF v3): two CPUs may
		 * read the same slot at once; the counter never loses a step. */
		i = svc->rr_next;
		__sync_fetch_and_add(&svc->rr_next, 1);
	} else {
		i = bpf_get_prandom_u32();
	}
	void *table = bpf_map_lookup_elem(&lb_maglev, &service_id);
	if (!table)
		return 0;
	__u32 idx = i % n;
	__u32 *id = bpf_map_lookup_elem(table, &idx);
	return id ? *id : 0;
}

/* sessionAffinity ClientIP: the client's backend while it is fresh, exists and is not terminating; else 0. */
static __always_inline __u32 affinity_get(void *map, void *key, __u32 timeout_s, __u64 now)
{
	struct affinity_entry *a = bpf_map_lookup_elem(map, key);
	if (!a || now - a->last_used_ns >= (__u64)timeout_s * 1000000000ULL)
		return 0;
	__u32 aid = a->backend_id;
	struct lb_backend *ab = bpf_map_lookup_elem(&lb_backends, &aid);
	/* A backend gone or terminating gets no new flow, affinity or not. */
	return ab && !(ab->flags & LB_BACKEND_F_TERMINATING) ? aid : 0;
}

static __always_inline void affinity_set(void *map, void *key, __u32 backend_id, __u64 now)
{
	struct affinity_entry ae = { .backend_id = backend_id, .last_used_ns = now };
	bpf_map_update_elem(map, key, &ae, BPF_ANY);
}

/* SNAT source ports [min, max] and how many of them a new connection probes (linearly,
 * from the flow's hash): all of a small range, 64 of the default one. */
#define SNAT_PROBES 64
static __always_inline void snat_range(__u32 *min, __u32 *span)
{
	__u32 lo = (__u32)cfg(CFG_SNAT_PORT_MIN, 32768), hi = (__u32)cfg(CFG_SNAT_PORT_MAX, 60999);
	if (lo < 1 || lo > 65535)
		lo = 32768;
	if (hi < lo || hi > 65535)
		hi = lo;
	*min = lo;
	*span = hi - lo + 1;
}

/*
 * ICMP errors (destination unreachable, time exceeded) quoting a tracked flow.
 *   egress  (from a backend to the client): quoted client→backend:bport becomes
 *           client→VIP:vport, the outer source the VIP.
 *   ingress (from the client's side to the VIP, e.g. fragmentation needed for a
 *           reply): quoted VIP:vport→client becomes backend:bport→client, the
 *           outer destination the backend; the kernel routes it there.
 * The quoted IP header's checksum and the ICMP checksum are fixed; the quoted
 * TCP/UDP checksum is left (receivers do not check it). Quoted headers with IP
 * options, or too short to hold the ports, are passed untouched.
 * Returns 1 when translated, 0 when not ours.
 */
static __always_inline int icmp_xlate4(struct __sk_buff *skb, __u32 l4off, __be32 outer_src, __be32 outer_dst, int egress)
{
	struct icmphdr ih;
	if (bpf_skb_load_bytes(skb, l4off, &ih, sizeof(ih)) < 0)
		return 0;
	if (ih.type != ICMP_DEST_UNREACH && ih.type != ICMP_TIME_EXCEEDED)
		return 0;
	__u32 in_ip = l4off + sizeof(struct icmphdr);
	struct iphdr inner;
	if (bpf_skb_load_bytes(skb, in_ip, &inner, sizeof(inner)) < 0)
		return 0;
	if (inner.version != 4 || inner.ihl != 5 || (inner.protocol != IPPROTO_TCP && inner.protocol != IPPROTO_UDP))
		return 0;
	__u32 in_l4 = in_ip + sizeof(struct iphdr);
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)) < 0)
		return 0;
	__u32 icmp_csum = l4off + offsetof(struct icmphdr, checksum);
	__u32 in_csum = in_ip + offsetof(struct iphdr, check);
	__be32 old_addr, new_addr;
	__be16 old_port, new_port;
	__u32 addr_off, port_off;
	if (egress) {
		/* Quoted: client → backend. Must be about the client we send it to. */
		if (inner.saddr != outer_dst)
			return 0;
		struct ct_key4 k = { .saddr = inner.saddr, .daddr = inner.daddr, .sport = ports[0], .dport = ports[1], .proto = inner.protocol, .dir = CT_EGRESS };
		struct ct_entry *e = bpf_map_lookup_elem(&ct4, &k);
		if (!e)
			return 0;
		old_addr = inner.daddr;
		new_addr = *(__be32 *)e->nat_addr;
		old_port = ports[1];
		new_port = e->nat_port;
		addr_off = in_ip + offsetof(struct iphdr, daddr);
		port_off = in_l4 + 2;
	} else {
		/* Quoted: VIP:vport → client (a reply we sent). */
		if (inner.saddr != outer_dst)
			return 0;
		struct ct_key4 k = { .saddr = inner.daddr, .daddr = inner.saddr, .sport = ports[1], .dport = ports[0], .proto = inner.protocol, .dir = CT_SERVICE };
		struct ct_entry *e = bpf_map_lookup_elem(&ct4, &k);
		if (!e)
			return 0;
		old_addr = inner.saddr;
		new_addr = *(__be32 *)e->nat_addr;
		old_port = ports[0];
		new_port = e->nat_port;
		addr_off = in_ip + offsetof(struct iphdr, saddr);
		port_off = in_l4;
		/* An SNATed connection: the backend knows it as backend:bport → node:nport, so the
		 * quoted destination (the client) becomes the node's SNAT address and port too. */
		struct ct_key4 ek = { .saddr = inner.daddr, .daddr = new_addr, .sport = ports[1], .dport = new_port, .proto = inner.protocol, .dir = CT_EGRESS };
		struct ct_entry *ee = bpf_map_lookup_elem(&ct4, &ek);
		__be32 snat = (__be32)cfg(CFG_SNAT_ADDR4, 0);
		if (ee && ee->snat_port && snat) {
			__be16 nport = ee->snat_port;
			__sum16 c0 = inner.check;
			if (bpf_l3_csum_replace(skb, in_csum, inner.daddr, snat, 4) < 0)
				return -1;
			__sum16 c1;
			if (bpf_skb_load_bytes(skb, in_csum, &c1, sizeof(c1)) < 0)
				return -1;
			if (bpf_l4_csum_replace(skb, icmp_csum, inner.daddr, snat, 4) < 0 || bpf_l4_csum_replace(skb, icmp_csum, c0, c1, 2) < 0 ||
			    bpf_l4_csum_replace(skb, icmp_csum, ports[1], nport, 2) < 0)
				return -1;
			if (bpf_skb_store_bytes(skb, in_ip + offsetof(struct iphdr, daddr), &snat, 4, 0) < 0 ||
			    bpf_skb_store_bytes(skb, in_l4 + 2, &nport, 2, 0) < 0)
				return -1;
			inner.check = c1; /* the next change starts from here */
		}
	}
	__sum16 old_csum = inner.check;
	if (bpf_l3_csum_replace(skb, in_csum, old_addr, new_addr, 4) < 0)
		return -1;
	__sum16 new_csum;
	if (bpf_skb_load_bytes(skb, in_csum, &new_csum, sizeof(new_csum)) < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, icmp_csum, old_addr, new_addr, 4) < 0 ||
	    bpf_l4_csum_replace(skb, icmp_csum, old_csum, new_csum, 2) < 0 ||
	    bpf_l4_csum_replace(skb, icmp_csum, old_port, new_port, 2) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, addr_off, &new_addr, 4, 0) < 0 || bpf_skb_store_bytes(skb, port_off, &new_port, 2, 0) < 0)
		return -1;
	/* The outer address: egress, the source when the backend itself reports (a router on
	 * the way keeps its own address); ingress, the destination (the VIP) becomes the backend. */
	if (!egress || outer_src == old_addr) {
		if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_addr, new_addr, 4) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, egress ? IP_SRC_OFF : IP_DST_OFF, &new_addr, 4, 0) < 0)
			return -1;
	}
	count(ST_ICMP_XLATE);
	return 1;
}

/* Ethernet + IPv4 carrying ICMP, not a fragment: the ICMP offset, else 0. */
static __always_inline __u32 icmp4_offset(struct __sk_buff *skb, __be32 *saddr, __be32 *daddr)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5 || ip->protocol != IPPROTO_ICMP)
		return 0;
	if (ip->frag_off & bpf_htons(IP_MF_ | IP_OFFSET_))
		return 0;
	*saddr = ip->saddr;
	*daddr = ip->daddr;
	return ETH_HLEN + (ip->ihl & 0xf) * 4;
}

/* Sends a rewritten packet on: FIB lookup, TTL, MACs, redirect; else the kernel routes it. */
static __always_inline int forward4(struct __sk_buff *skb, __be32 src, __be32 dst, __u8 tos, __u8 proto, __u16 tot_len, __u8 ttl)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET_;
	fib.tos = tos;
	fib.l4_protocol = proto;
	fib.tot_len = tot_len;
	fib.ipv4_src = src;
	fib.ipv4_dst = dst;
	fib.ifindex = skb->ingress_ifindex;
	long frc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (frc != BPF_FIB_LKUP_RET_SUCCESS && frc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		count(ST_FIB_PASS);
		return TC_ACT_OK;
	}
	if (ttl <= 1) {
		count(ST_TTL);
		return TC_ACT_OK; /* the kernel sends Time Exceeded */
	}
	/* Decrement TTL: the 16-bit word (ttl, protocol). */
	__u16 oldw = ((__u16)ttl << 8) | proto;
	__u16 neww = ((__u16)(ttl - 1) << 8) | proto;
	__u8 nttl = ttl - 1;
	bpf_l3_csum_replace(skb, IP_CSUM_OFF, bpf_htons(oldw), bpf_htons(neww), 2);
	bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, ttl), &nttl, 1, 0);
	if (frc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, 0, 0, 0);
	if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) < 0 || bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(fib.ifindex, 0);
}

/* A reply from a backend of an SNAT service, to the node's SNAT address: back to the client as VIP:port. */
static __always_inline int snat_reply4(struct __sk_buff *skb, struct l4_info *l4, __be32 saddr, __be32 daddr, __u8 tos, __u16 tot_len, __u8 ttl)
{
	struct ct_key4 rkey = { .saddr = saddr, .daddr = daddr, .sport = l4->sport, .dport = l4->dport, .proto = l4->proto, .dir = CT_SNAT };
	struct ct_entry *r = bpf_map_lookup_elem(&ct4, &rkey);
	if (!r)
		return PASS;
	__be32 client = *(__be32 *)r->nat_addr;
	__be16 cport = r->nat_port;
	struct ct_key4 ekey = { .saddr = client, .daddr = saddr, .sport = cport, .dport = l4->sport, .proto = l4->proto, .dir = CT_EGRESS };
	struct ct_entry *e = bpf_map_lookup_elem(&ct4, &ekey);
	if (!e)
		return PASS;
	r->expires_ns = ct_touch_reply(e, l4->proto, l4->tcpflags, skb->len);
	__be32 vip = *(__be32 *)e->nat_addr;
	__be16 vport = e->nat_port;
	if (rewrite4(skb, l4, 1, daddr, client, l4->dport, cport) < 0 || rewrite4(skb, l4, 0, saddr, vip, l4->sport, vport) < 0)
		return TC_ACT_SHOT;
	count(ST_REVNAT);
	return forward4(skb, vip, client, tos, l4->proto, tot_len, ttl);
}

/* Allocates the node's port for a new SNAT connection: the reverse entry is the reservation. */
static __always_inline __be16 snat_alloc4(__be32 baddr, __be16 bport, __be32 snat, __u8 proto, __be32 client, __be16 cport,
					  __u32 backend_id, __u32 service_id, __u32 hash, __u64 expires)
{
	__u8 caddr[16] = {};
	*(__be32 *)caddr = client;
	struct ct_entry *r = ct_build(backend_id, service_id, caddr, cport, 0, 0, 0, 0, expires, 0);
	if (!r)
		return 0;
	__u32 min, span;
	snat_range(&min, &span);
	__u32 start = hash % span;
	for (__u32 i = 0; i < SNAT_PROBES && i < span; i++) {
		__u16 p = (__u16)(min + (start + i) % span);
		struct ct_key4 rkey = { .saddr = baddr, .daddr = snat, .sport = bport, .dport = bpf_htons(p), .proto = proto, .dir = CT_SNAT };
		long rc = bpf_map_update_elem(&ct4, &rkey, r, BPF_NOEXIST);
		if (rc == 0) {
			count(ST_CT_CREATED);
			return bpf_htons(p);
		}
		if (rc != -17 /* EEXIST: the port is taken toward this backend */) {
			count(ST_CT_FULL);
			return 0;
		}
	}
	count(ST_SNAT_EXHAUSTED);
	return 0;
}

/*
 * An ICMP error (destination unreachable incl. fragmentation needed, time
 * exceeded) sent to the node's SNAT address about a connection it SNATed: the
 * quoted node:nport → backend:bport becomes client:cport → VIP:vport, the outer
 * destination the client, and when the backend itself reports, the outer source
 * the VIP (a router on the way keeps its own). Then on to the client. Quoted
 * headers with IP options, or of flows we do not know, pass untouched.
 */
static __always_inline int icmp_snat4(struct __sk_buff *skb, __u32 l4off, __be32 outer_src, __be32 snat)
{
	struct icmphdr ih;
	if (bpf_skb_load_bytes(skb, l4off, &ih, sizeof(ih)) < 0)
		return PASS;
	if (ih.type != ICMP_DEST_UNREACH && ih.type != ICMP_TIME_EXCEEDED)
		return PASS;
	__u32 in_ip = l4off + sizeof(struct icmphdr);
	struct iphdr inner;
	if (bpf_skb_load_bytes(skb, in_ip, &inner, sizeof(inner)) < 0)
		return PASS;
	if (inner.version != 4 || inner.ihl != 5 || (inner.protocol != IPPROTO_TCP && inner.protocol != IPPROTO_UDP) || inner.saddr != snat)
		return PASS;
	__u32 in_l4 = in_ip + sizeof(struct iphdr);
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)) < 0)
		return PASS;
	__be32 baddr = inner.daddr;
	struct ct_key4 rkey = { .saddr = baddr, .daddr = snat, .sport = ports[1], .dport = ports[0], .proto = inner.protocol, .dir = CT_SNAT };
	struct ct_entry *r = bpf_map_lookup_elem(&ct4, &rkey);
	if (!r)
		return PASS;
	__be32 client = *(__be32 *)r->nat_addr;
	__be16 cport = r->nat_port;
	struct ct_key4 ekey = { .saddr = client, .daddr = baddr, .sport = cport, .dport = ports[1], .proto = inner.protocol, .dir = CT_EGRESS };
	struct ct_entry *e = bpf_map_lookup_elem(&ct4, &ekey);
	if (!e)
		return PASS;
	__be32 vip = *(__be32 *)e->nat_addr;
	__be16 vport = e->nat_port;
	struct iphdr outer;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &outer, sizeof(outer)) < 0)
		return PASS;
	__u32 icmp_csum = l4off + offsetof(struct icmphdr, checksum);
	__u32 in_csum = in_ip + offsetof(struct iphdr, check);
	/* The quoted IP header: both addresses, its checksum; the ICMP checksum follows every change. */
	__sum16 old_csum = inner.check;
	if (bpf_l3_csum_replace(skb, in_csum, snat, client, 4) < 0 || bpf_l3_csum_replace(skb, in_csum, baddr, vip, 4) < 0)
		return TC_ACT_SHOT;
	__sum16 new_csum;
	if (bpf_skb_load_bytes(skb, in_csum, &new_csum, sizeof(new_csum)) < 0)
		return TC_ACT_SHOT;
	if (bpf_l4_csum_replace(skb, icmp_csum, snat, client, 4) < 0 || bpf_l4_csum_replace(skb, icmp_csum, baddr, vip, 4) < 0 ||
	    bpf_l4_csum_replace(skb, icmp_csum, old_csum, new_csum, 2) < 0 || bpf_l4_csum_replace(skb, icmp_csum, ports[0], cport, 2) < 0 ||
	    bpf_l4_csum_replace(skb, icmp_csum, ports[1], vport, 2) < 0)
		return TC_ACT_SHOT;
	__be16 nports[2] = { cport, vport };
	if (bpf_skb_store_bytes(skb, in_ip + offsetof(struct iphdr, saddr), &client, 4, 0) < 0 ||
	    bpf_skb_store_bytes(skb, in_ip + offsetof(struct iphdr, daddr), &vip, 4, 0) < 0 ||
	    bpf_skb_store_bytes(skb, in_l4, nports, sizeof(nports), 0) < 0)
		return TC_ACT_SHOT;
	/* Outer: to the client; from the VIP when the backend itself reports. */
	__be32 src = outer_src == baddr ? vip : outer_src;
	if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, snat, client, 4) < 0 || bpf_skb_store_bytes(skb, IP_DST_OFF, &client, 4, 0) < 0)
		return TC_ACT_SHOT;
	if (src != outer_src && (bpf_l3_csum_replace(skb, IP_CSUM_OFF, outer_src, src, 4) < 0 || bpf_skb_store_bytes(skb, IP_SRC_OFF, &src, 4, 0) < 0))
		return TC_ACT_SHOT;
	count(ST_ICMP_XLATE);
	return forward4(skb, src, client, outer.tos, IPPROTO_ICMP, bpf_ntohs(outer.tot_len), outer.ttl);
}

/*
 * Refreshes the CT_SERVICE entry of a flow (client → VIP: which backend), or
 * creates it: one place for the DSR path and the DNAT path, which differ only
 * in the TCP flags they record and the lifetime they give it.
 */
static __always_inline void ct_touch_service(void *map, struct ct_entry *sent, void *skey, __u32 backend_id, __u32 service_id,
					     const __u8 *baddr16, __be16 bport, __u16 flags, __u32 len, __u64 now, __u64 life)
{
	if (sent) {
		sent->expires_ns = now + life;
		__sync_fetch_and_add(&sent->packets_fwd, 1);
		__sync_fetch_and_add(&sent->bytes_fwd, len);
		return;
	}
	/* nat_addr: the backend as lb_backends holds it (IPv4: 4 bytes, then zeros). */
	struct ct_entry *s = ct_build(backend_id, service_id, baddr16, bport, flags, 1, len, now, now + life, 0);
	if (s)
		ct_create(map, skey, s);
}

/* ---------------------------------------------------------------------------
 * IPv6: services (TCP, UDP) balanced the same way — the same selection,
 * CT_SERVICE / CT_EGRESS / CT_SNAT entries in ct6, reverse NAT at egress (DNAT)
 * or at ingress (SNAT replies to the node's IPv6 SNAT address), DSR by MAC,
 * ClientIP affinity in lb6_affinity. No IP header checksum; the TCP/UDP
 * checksum covers the 16-byte addresses through the pseudo header.
 * Extension headers other than a fragment
 * header are not parsed (the packet passes); fragments to a VIP are dropped
 * and counted, as for IPv4.
 * ------------------------------------------------------------------------- */

#define IP6_SRC_OFF (ETH_HLEN + offsetof(struct ipv6hdr, saddr))
#define IP6_DST_OFF (ETH_HLEN + offsetof(struct ipv6hdr, daddr))
#define IP6_HLIM_OFF (ETH_HLEN + offsetof(struct ipv6hdr, hop_limit))

static __always_inline __u32 flow_hash6(const __u32 *saddr, const __u32 *daddr, __be16 sport, __be16 dport, __u8 proto)
{
	__u32 h = 0x48524c36; /* "HRL6" */
	for (int i = 0; i < 4; i++)
		h = mix(h, saddr[i]);
	for (int i = 0; i < 4; i++)
		h = mix(h, daddr[i]);
	h = mix(h, ((__u32)sport << 16) | dport);
	h = mix(h, proto);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* Ethernet + IPv6 + TCP/UDP ports; addresses copied out. 0: ok, 1: not ours, 2: fragment, 3: truncated. */
static __always_inline int parse6(struct __sk_buff *skb, __u32 *saddr, __u32 *daddr, __u8 *hlim, struct l4_info *l4)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return 1;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > data_end)
		return 3;
	if (ip6->version != 6)
		return 3;
	__builtin_memcpy(saddr, &ip6->saddr, 16);
	__builtin_memcpy(daddr, &ip6->daddr, 16);
	*hlim = ip6->hop_limit;
	if (ip6->nexthdr == NEXTHDR_FRAGMENT_)
		return 2;
	if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
		return 1;
	return parse_ports(data, data_end, ETH_HLEN + sizeof(struct ipv6hdr), ip6->nexthdr, l4);
}

/* Rewrites one IPv6 address (16 bytes) and one port, fixing the TCP/UDP checksum (pseudo header). */
static __always_inline int rewrite6(struct __sk_buff *skb, struct l4_info *l4, int dst, __u32 *old_ip, __u32 *new_ip,
				    __be16 old_port, __be16 new_port)
{
	__u64 l4flags = l4->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 port_off = l4->l4off + (dst ? 2 : 0);
	__s64 diff = bpf_csum_diff(old_ip, 16, new_ip, 16, 0);
	if (diff < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, l4->csumoff, 0, (__u64)diff, l4flags | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, l4->csumoff, old_port, new_port, l4flags | 2) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, dst ? IP6_DST_OFF : IP6_SRC_OFF, new_ip, 16, 0) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, port_off, &new_port, 2, 0) < 0)
		return -1;
	return 0;
}

/* forward4 for IPv6: FIB lookup, hop limit, MACs, redirect; else the kernel routes it. */
static __attribute__((noinline)) int forward6(struct __sk_buff *skb, __u32 *src, __u32 *dst, __u8 proto, __u8 hlim)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6_;
	fib.l4_protocol = proto;
	fib.tot_len = skb->len - ETH_HLEN;
	__builtin_memcpy(fib.ipv6_src, src, 16);
	__builtin_memcpy(fib.ipv6_dst, dst, 16);
	fib.ifindex = skb->ingress_ifindex;
	long frc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (frc != BPF_FIB_LKUP_RET_SUCCESS && frc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		count(ST_FIB_PASS);
		return TC_ACT_OK;
	}
	if (hlim <= 1) {
		count(ST_TTL);
		return TC_ACT_OK; /* the kernel sends Time Exceeded */
	}
	__u8 nh = hlim - 1;
	bpf_skb_store_bytes(skb, IP6_HLIM_OFF, &nh, 1, 0);
	if (frc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, 0, 0, 0);
	if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) < 0 || bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(fib.ifindex, 0);
}

static __always_inline int eq6(const __u32 *a, const __u32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* The node's IPv6 for SNAT services (lb_config, two slots); 0 when none is set. */
static __always_inline int snat_addr6(__u32 *a)
{
	__u64 lo = cfg(CFG_SNAT_ADDR6_LO, 0), hi = cfg(CFG_SNAT_ADDR6_HI, 0);
	__builtin_memcpy(a, &lo, 8);
	__builtin_memcpy(a + 2, &hi, 8);
	return lo || hi;
}

/* snat_alloc4 for IPv6: the CT_SNAT entry {backend, node, bport, nport} in ct6 is the reservation. */
static __always_inline __be16 snat_alloc6(const __u32 *baddr, __be16 bport, const __u32 *snat, __u8 proto, const __u32 *client,
					  __be16 cport, __u32 backend_id, __u32 service_id, __u32 hash, __u64 expires)
{
	struct ct_entry *r = ct_build(backend_id, service_id, client, cport, 0, 0, 0, 0, expires, 0);
	if (!r)
		return 0;
	struct ct_key6 rkey = { .sport = bport, .proto = proto, .dir = CT_SNAT };
	__builtin_memcpy(rkey.saddr, baddr, 16);
	__builtin_memcpy(rkey.daddr, snat, 16);
	__u32 min, span;
	snat_range(&min, &span);
	__u32 start = hash % span;
	for (__u32 i = 0; i < SNAT_PROBES && i < span; i++) {
		__u16 p = (__u16)(min + (start + i) % span);
		rkey.dport = bpf_htons(p);
		long rc = bpf_map_update_elem(&ct6, &rkey, r, BPF_NOEXIST);
		if (rc == 0) {
			count(ST_CT_CREATED);
			return bpf_htons(p);
		}
		if (rc != -17) {
			count(ST_CT_FULL);
			return 0;
		}
	}
	count(ST_SNAT_EXHAUSTED);
	return 0;
}

/* snat_reply4 for IPv6: a backend's reply to the node's SNAT address goes back to the client from [VIP]:port. */
static __always_inline int snat_reply6(struct __sk_buff *skb, struct l4_info *l4, __u32 *saddr, __u32 *daddr, __u8 hlim)
{
	struct ct_key6 rkey = { .sport = l4->sport, .dport = l4->dport, .proto = l4->proto, .dir = CT_SNAT };
	__builtin_memcpy(rkey.saddr, saddr, 16);
	__builtin_memcpy(rkey.daddr, daddr, 16);
	struct ct_entry *r = bpf_map_lookup_elem(&ct6, &rkey);
	if (!r)
		return PASS;
	__u32 client[4];
	__builtin_memcpy(client, r->nat_addr, 16);
	__be16 cport = r->nat_port;
	struct ct_key6 ekey = { .sport = cport, .dport = l4->sport, .proto = l4->proto, .dir = CT_EGRESS };
	__builtin_memcpy(ekey.saddr, client, 16);
	__builtin_memcpy(ekey.daddr, saddr, 16);
	struct ct_entry *e = bpf_map_lookup_elem(&ct6, &ekey);
	if (!e)
		return PASS;
	r->expires_ns = ct_touch_reply(e, l4->proto, l4->tcpflags, skb->len);
	__u32 vip[4];
	__builtin_memcpy(vip, e->nat_addr, 16);
	__be16 vport = e->nat_port;
	if (rewrite6(skb, l4, 1, daddr, client, l4->dport, cport) < 0 || rewrite6(skb, l4, 0, saddr, vip, l4->sport, vport) < 0)
		return TC_ACT_SHOT;
	count(ST_REVNAT);
	return forward6(skb, vip, client, l4->proto, hlim);
}

/* lb6_ingress's keys, per CPU: off its stack frame (with the calls below it, 512 bytes in all). */
struct lb6_keys {
	struct ct_key6 skey;
	struct ct_key6 ekey;
	struct ct_key6 rkey;
	struct affinity_key6 akey;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb6_keys);
	__uint(max_entries, 1);
} lb6_scratch SEC(".maps");

/* DSR over IPv6: only the MACs change, toward the backend's (resolved by the kernel when unknown). */
static __attribute__((noinline)) int dsr6(struct __sk_buff *skb, __u32 *saddr, __u32 *baddr, __u8 proto)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6_;
	fib.l4_protocol = proto;
	fib.tot_len = skb->len - ETH_HLEN;
	__builtin_memcpy(fib.ipv6_src, saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, baddr, 16);
	fib.ifindex = skb->ingress_ifindex;
	long frc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (frc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		struct bpf_redir_neigh nh = { .nh_family = AF_INET6_ };
		__builtin_memcpy(nh.ipv6_nh, baddr, 16);
		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	if (frc != BPF_FIB_LKUP_RET_SUCCESS) {
		count(ST_FIB_PASS);
		return TC_ACT_SHOT; /* no route to the backend: the VIP cannot be delivered as is */
	}
	if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) < 0 || bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(fib.ifindex, 0);
}

#define LB6_SNAT_REPLY 0x10000 /* lb6_ingress: a packet to the node's IPv6 SNAT address */
#define LB6_ICMP_SNAT 0x10002   /* lb6_ingress: ICMPv6 to the node's IPv6 SNAT address */
#define LB6_ICMP_VIP 0x10003    /* lb6_ingress: ICMPv6 to a balanced IPv6 VIP */
#define IPPROTO_ICMPV6__ 58

/* IPv6 whose next header is ICMPv6. */
static __always_inline int is_icmp6(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	return (void *)(ip6 + 1) <= data_end && ip6->nexthdr == IPPROTO_ICMPV6__;
}

/*
 * icmp_snat4 for IPv6: an ICMPv6 error (destination unreachable, packet too
 * big, time exceeded) sent to the node's SNAT address about a connection it
 * SNATed. The quoted node:nport → backend:bport becomes client:cport →
 * [VIP]:vport, the outer destination the client, the outer source the VIP when
 * the backend itself reports. The ICMPv6 checksum covers the pseudo header and
 * the quoted bytes: every change is folded in. Then on to the client.
 */
static __attribute__((noinline)) int icmp6_snat_ingress(struct __sk_buff *skb)
{
	__u32 off = ETH_HLEN + sizeof(struct ipv6hdr);
	struct ipv6hdr outer;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &outer, sizeof(outer)) < 0 || outer.nexthdr != IPPROTO_ICMPV6__)
		return PASS;
	struct icmphdr ih;
	if (bpf_skb_load_bytes(skb, off, &ih, sizeof(ih)) < 0)
		return PASS;
	if (ih.type != 1 && ih.type != 2 && ih.type != 3)
		return PASS;
	__u32 in_ip = off + sizeof(struct icmphdr);
	struct ipv6hdr inner;
	if (bpf_skb_load_bytes(skb, in_ip, &inner, sizeof(inner)) < 0)
		return PASS;
	if (inner.nexthdr != IPPROTO_TCP && inner.nexthdr != IPPROTO_UDP)
		return PASS;
	__u32 in_l4 = in_ip + sizeof(struct ipv6hdr);
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)) < 0)
		return PASS;
	__u32 snat[4], qsrc[4], baddr[4], osrc[4];
	if (!snat_addr6(snat))
		return PASS;
	__builtin_memcpy(qsrc, &inner.saddr, 16);
	__builtin_memcpy(baddr, &inner.daddr, 16);
	__builtin_memcpy(osrc, &outer.saddr, 16);
	if (!eq6(qsrc, snat))
		return PASS;
	struct ct_key6 k = { .sport = ports[1], .dport = ports[0], .proto = inner.nexthdr, .dir = CT_SNAT };
	__builtin_memcpy(k.saddr, baddr, 16);
	__builtin_memcpy(k.daddr, snat, 16);
	struct ct_entry *r = bpf_map_lookup_elem(&ct6, &k);
	if (!r)
		return PASS;
	__u32 client[4];
	__builtin_memcpy(client, r->nat_addr, 16);
	__be16 cport = r->nat_port;
	k.sport = cport;
	k.dport = ports[1];
	k.dir = CT_EGRESS;
	__builtin_memcpy(k.saddr, client, 16);
	__builtin_memcpy(k.daddr, baddr, 16);
	struct ct_entry *e = bpf_map_lookup_elem(&ct6, &k);
	if (!e)
		return PASS;
	__u32 vip[4];
	__builtin_memcpy(vip, e->nat_addr, 16);
	__be16 vport = e->nat_port;
	__u32 csum = off + offsetof(struct icmphdr, checksum);
	/* Quoted: source snat → client, destination backend → VIP, ports (the body: no pseudo-header flag). */
	__s64 d1 = bpf_csum_diff(snat, 16, client, 16, 0);
	__s64 d2 = bpf_csum_diff(baddr, 16, vip, 16, 0);
	if (d1 < 0 || d2 < 0)
		return TC_ACT_SHOT;
	if (bpf_l4_csum_replace(skb, csum, 0, (__u64)d1, 0) < 0 || bpf_l4_csum_replace(skb, csum, 0, (__u64)d2, 0) < 0 ||
	    bpf_l4_csum_replace(skb, csum, ports[0], cport, 2) < 0 || bpf_l4_csum_replace(skb, csum, ports[1], vport, 2) < 0)
		return TC_ACT_SHOT;
	__be16 nports[2] = { cport, vport };
	if (bpf_skb_store_bytes(skb, in_ip + offsetof(struct ipv6hdr, saddr), client, 16, 0) < 0 ||
	    bpf_skb_store_bytes(skb, in_ip + offsetof(struct ipv6hdr, daddr), vip, 16, 0) < 0 ||
	    bpf_skb_store_bytes(skb, in_l4, nports, sizeof(nports), 0) < 0)
		return TC_ACT_SHOT;
	/* Outer destination snat → client (pseudo header), and the source when the backend itself reports. */
	if (bpf_l4_csum_replace(skb, csum, 0, (__u64)d1, BPF_F_PSEUDO_HDR) < 0 || bpf_skb_store_bytes(skb, IP6_DST_OFF, client, 16, 0) < 0)
		return TC_ACT_SHOT;
	__u32 *src = osrc;
	if (eq6(osrc, baddr)) {
		if (bpf_l4_csum_replace(skb, csum, 0, (__u64)d2, BPF_F_PSEUDO_HDR) < 0 || bpf_skb_store_bytes(skb, IP6_SRC_OFF, vip, 16, 0) < 0)
			return TC_ACT_SHOT;
		src = vip;
	}
	count(ST_ICMP_XLATE);
	return forward6(skb, src, client, IPPROTO_ICMPV6__, outer.hop_limit);
}

/* A backend's reply to the node's IPv6 SNAT address (see snat_reply6); not inlined, its own frame. */
static __attribute__((noinline)) int snat6_ingress(struct __sk_buff *skb)
{
	__u32 saddr[4], daddr[4];
	__u8 hlim = 0;
	struct l4_info l4 = {};
	if (parse6(skb, saddr, daddr, &hlim, &l4) != 0)
		return PASS;
	return snat_reply6(skb, &l4, saddr, daddr, hlim);
}

/*
 * An ICMPv6 error sent to a VIP about a reply we sent (e.g. packet too big on
 * the way to the client): the quoted [VIP]:vport → client:cport becomes
 * backend:bport → client:cport — and for an SNATed connection → node:nport, as
 * the backend knows it — and the outer destination the backend; the kernel
 * routes it there. The ICMPv6 checksum follows every change (pseudo header
 * included). Unknown flows pass untouched.
 */
static __attribute__((noinline)) int icmp6_vip_ingress(struct __sk_buff *skb)
{
	__u32 off = ETH_HLEN + sizeof(struct ipv6hdr);
	struct ipv6hdr outer;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &outer, sizeof(outer)) < 0 || outer.nexthdr != IPPROTO_ICMPV6__)
		return PASS;
	struct icmphdr ih;
	if (bpf_skb_load_bytes(skb, off, &ih, sizeof(ih)) < 0 || (ih.type != 1 && ih.type != 2 && ih.type != 3))
		return PASS;
	__u32 in_ip = off + sizeof(struct icmphdr);
	struct ipv6hdr inner;
	if (bpf_skb_load_bytes(skb, in_ip, &inner, sizeof(inner)) < 0 || (inner.nexthdr != IPPROTO_TCP && inner.nexthdr != IPPROTO_UDP))
		return PASS;
	__u32 in_l4 = in_ip + sizeof(struct ipv6hdr);
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)) < 0)
		return PASS;
	__u32 vip[4], client[4], odst[4];
	__builtin_memcpy(vip, &inner.saddr, 16);
	__builtin_memcpy(client, &inner.daddr, 16);
	__builtin_memcpy(odst, &outer.daddr, 16);
	if (!eq6(vip, odst))
		return PASS; /* quoted: VIP:vport → client, sent back to the VIP */
	struct ct_key6 k = { .sport = ports[1], .dport = ports[0], .proto = inner.nexthdr, .dir = CT_SERVICE };
	__builtin_memcpy(k.saddr, client, 16);
	__builtin_memcpy(k.daddr, vip, 16);
	struct ct_entry *e = bpf_map_lookup_elem(&ct6, &k);
	if (!e)
		return PASS;
	__u32 baddr[4];
	__builtin_memcpy(baddr, e->nat_addr, 16);
	__be16 bport = e->nat_port;
	__u32 csum = off + offsetof(struct icmphdr, checksum);
	__s64 d1 = bpf_csum_diff(vip, 16, baddr, 16, 0);
	if (d1 < 0)
		return TC_ACT_SHOT;
	/* Quoted source (body) and outer destination (pseudo header): VIP → backend. */
	if (bpf_l4_csum_replace(skb, csum, 0, (__u64)d1, 0) < 0 || bpf_l4_csum_replace(skb, csum, ports[0], bport, 2) < 0 ||
	    bpf_l4_csum_replace(skb, csum, 0, (__u64)d1, BPF_F_PSEUDO_HDR) < 0)
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, in_ip + offsetof(struct ipv6hdr, saddr), baddr, 16, 0) < 0 ||
	    bpf_skb_store_bytes(skb, in_l4, &bport, 2, 0) < 0 || bpf_skb_store_bytes(skb, IP6_DST_OFF, baddr, 16, 0) < 0)
		return TC_ACT_SHOT;
	/* SNATed: the quoted destination is the node's address and port toward the backend. */
	k.sport = ports[1];
	k.dport = bport;
	k.dir = CT_EGRESS;
	__builtin_memcpy(k.daddr, baddr, 16);
	struct ct_entry *ee = bpf_map_lookup_elem(&ct6, &k);
	__u32 snat[4];
	if (ee && ee->snat_port && snat_addr6(snat)) {
		__be16 nport = ee->snat_port;
		__s64 d3 = bpf_csum_diff(client, 16, snat, 16, 0);
		if (d3 < 0)
			return TC_ACT_SHOT;
		if (bpf_l4_csum_replace(skb, csum, 0, (__u64)d3, 0) < 0 || bpf_l4_csum_replace(skb, csum, ports[1], nport, 2) < 0)
			return TC_ACT_SHOT;
		if (bpf_skb_store_bytes(skb, in_ip + offsetof(struct ipv6hdr, daddr), snat, 16, 0) < 0 ||
		    bpf_skb_store_bytes(skb, in_l4 + 2, &nport, 2, 0) < 0)
			return TC_ACT_SHOT;
	}
	count(ST_ICMP_XLATE);
	return PASS;
}

/* Not inlined: its own stack frame (the IPv4 and IPv6 paths together exceed 512 bytes). */
static __attribute__((noinline)) int lb6_ingress(struct __sk_buff *skb)
{
	__u32 saddr[4], vip[4];
	__u8 hlim = 0;
	struct l4_info l4 = {};
	int rc = parse6(skb, saddr, vip, &hlim, &l4);
	if (rc == 1 && is_icmp6(skb)) {
		__u32 snat6[4];
		if (snat_addr6(snat6) && eq6(vip, snat6))
			return LB6_ICMP_SNAT; /* an ICMPv6 error about a connection we SNATed? the caller looks, in its own frame */
		struct lb6_key marker = {};
		__builtin_memcpy(marker.vip, vip, 16);
		if (bpf_map_lookup_elem(&lb6_services, &marker))
			return LB6_ICMP_VIP; /* to a VIP we balance: about a reply we sent? */
		return PASS;
	}
	if (rc == 1 || rc == 3)
		return PASS; /* not ours / truncated: never touched */
	if (rc == 2) {
		struct lb6_key marker = {};
		__builtin_memcpy(marker.vip, vip, 16);
		if (!bpf_map_lookup_elem(&lb6_services, &marker))
			return PASS;
		count(ST_FRAGMENT);
		return TC_ACT_SHOT;
	}
	struct lb6_key sk = { .port = l4.dport, .proto = l4.proto };
	__builtin_memcpy(sk.vip, vip, 16);
	struct lb_service *svc = bpf_map_lookup_elem(&lb6_services, &sk);
	__u32 snat[4] = {};
	if (!svc) {
		if (snat_addr6(snat) && eq6(vip, snat))
			return LB6_SNAT_REPLY; /* the caller runs snat6_ingress: its own frame */
		return PASS;
	}
	__u32 service_id = svc->id;
	int do_snat = svc->flags & LB_SVC_F_SNAT;
	/* The SNAT address is read only for an SNAT service (two lookups the others do not pay). */
	if (do_snat && !snat_addr6(snat)) {
		count(ST_NO_BACKEND); /* an SNAT service without an IPv6 SNAT address */
		return TC_ACT_SHOT;
	}
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	struct lb6_keys *kk = bpf_map_lookup_elem(&lb6_scratch, &zero);
	if (!kk)
		return TC_ACT_SHOT;
	__builtin_memset(kk, 0, sizeof(*kk));

	struct ct_key6 *skey = &kk->skey;
	skey->sport = l4.sport;
	skey->dport = l4.dport;
	skey->proto = l4.proto;
	skey->dir = CT_SERVICE;
	__builtin_memcpy(skey->saddr, saddr, 16);
	__builtin_memcpy(skey->daddr, vip, 16);
	struct ct_entry *sent = bpf_map_lookup_elem(&ct6, skey);
	struct lb_backend *be = 0;
	__u32 backend_id = 0;
	if (sent) {
		backend_id = sent->backend_id;
		be = bpf_map_lookup_elem(&lb_backends, &backend_id);
		if (!be) {
			ct_delete(&ct6, skey);
			sent = 0;
		}
	}
	if (!sent) {
		if (svc->backends == 0) {
			count(ST_NO_BACKEND);
			return TC_ACT_SHOT;
		}
		__u32 timeout_s = svc->affinity_timeout_s;
		struct affinity_key6 *akey = &kk->akey;
		akey->service_id = service_id;
		__builtin_memcpy(akey->client, saddr, 16);
		backend_id = timeout_s ? affinity_get(&lb6_affinity, akey, timeout_s, now) : 0;
		if (!backend_id)
			backend_id = pick_backend(svc, service_id, flow_hash6(saddr, vip, l4.sport, l4.dport, l4.proto));
		be = backend_id ? bpf_map_lookup_elem(&lb_backends, &backend_id) : 0;
		if (be && be->family == 6 && timeout_s)
			affinity_set(&lb6_affinity, akey, backend_id, now);
	}
	if (!be || be->family != 6) {
		count(ST_NO_BACKEND);
		return TC_ACT_SHOT;
	}
	__u32 baddr[4];
	__builtin_memcpy(baddr, be->addr, 16);
	__be16 bport = be->port;

	/* DSR: the packet goes to the backend's MAC unchanged ([VIP]:port kept); the reply bypasses us. */
	if (svc->flags & LB_SVC_F_DSR) {
		__u64 dlife = lifetime(l4.proto, l4.proto == IPPROTO_TCP ? tcp_flags_to_ct(l4.tcpflags, 0) | CT_F_ESTABLISHED : 0);
		ct_touch_service(&ct6, sent, skey, backend_id, service_id, (const __u8 *)baddr, bport, 0, skb->len, now, dlife);
		count(ST_FORWARDED);
		return dsr6(skb, saddr, baddr, l4.proto);
	}

	struct ct_key6 *ekey = &kk->ekey;
	ekey->sport = l4.sport;
	ekey->dport = bport;
	ekey->proto = l4.proto;
	ekey->dir = CT_EGRESS;
	__builtin_memcpy(ekey->saddr, saddr, 16);
	__builtin_memcpy(ekey->daddr, baddr, 16);
	struct ct_entry *eent = bpf_map_lookup_elem(&ct6, ekey);
	__u16 tf = l4.proto == IPPROTO_TCP ? tcp_flags_to_ct(l4.tcpflags, 0) : 0;
	__u64 life;
	__be16 snat_port = 0;
	if (eent) {
		__u16 f = eent->flags | tf;
		if (l4.proto == IPPROTO_TCP && (l4.tcpflags & 0x12) == 0x02 && (eent->flags & (CT_F_TX_CLOSING | CT_F_RX_CLOSING)))
			f = CT_F_SYN_SEEN;
		eent->flags = f;
		life = lifetime(l4.proto, f);
		eent->expires_ns = now + life;
		__sync_fetch_and_add(&eent->packets_fwd, 1);
		__sync_fetch_and_add(&eent->bytes_fwd, skb->len);
		snat_port = eent->snat_port;
		if (do_snat && snat_port) {
			struct ct_key6 *rkey = &kk->rkey;
			rkey->sport = bport;
			rkey->dport = snat_port;
			rkey->proto = l4.proto;
			rkey->dir = CT_SNAT;
			__builtin_memcpy(rkey->saddr, baddr, 16);
			__builtin_memcpy(rkey->daddr, snat, 16);
			struct ct_entry *r = bpf_map_lookup_elem(&ct6, rkey);
			if (r)
				r->expires_ns = now + life;
			else
				snat_port = 0;
		}
	}
	if (do_snat && !snat_port) {
		life = lifetime(l4.proto, eent ? eent->flags : tf);
		snat_port = snat_alloc6(baddr, bport, snat, l4.proto, saddr, l4.sport, backend_id, service_id,
					flow_hash6(saddr, vip, l4.sport, l4.dport, l4.proto), now + life);
		if (!snat_port)
			return TC_ACT_SHOT; /* counted: snat_exhausted or ct_full */
		if (eent)
			eent->snat_port = snat_port;
	}
	if (!eent) {
		life = lifetime(l4.proto, tf);
		struct ct_entry *e = ct_build(backend_id, service_id, vip, l4.dport, tf, 1, skb->len, now, now + life, snat_port);
		if (e)
			ct_create(&ct6, ekey, e);
	}
	ct_touch_service(&ct6, sent, skey, backend_id, service_id, (const __u8 *)baddr, bport, tf, skb->len, now, life);

	if (rewrite6(skb, &l4, 1, vip, baddr, l4.dport, bport) < 0)
		return TC_ACT_SHOT;
	count(ST_FORWARDED);
	if (do_snat) {
		if (rewrite6(skb, &l4, 0, saddr, snat, l4.sport, snat_port) < 0)
			return TC_ACT_SHOT;
		return forward6(skb, snat, baddr, l4.proto, hlim);
	}
	return forward6(skb, saddr, baddr, l4.proto, hlim);
}

/*
 * ICMPv6 errors (destination unreachable, packet too big, time exceeded) a
 * backend — or a router between it and the client — sends about a tracked
 * connection, at egress: the quoted client → backend:bport becomes
 * client → VIP:vport, and when the backend itself reports, the outer source
 * becomes the VIP. The ICMPv6 checksum covers the pseudo header and the
 * quoted bytes: both changes are folded in. (The other direction — errors
 * sent to the VIP about a reply — is icmp6_vip_ingress.)
 * Returns 1 when translated, 0 when not ours, -1 on a failed rewrite.
 */
#define ICMPV6_DEST_UNREACH_ 1
#define ICMPV6_PKT_TOOBIG_ 2
#define ICMPV6_TIME_EXCEED_ 3
#define IPPROTO_ICMPV6_ 58
static __always_inline int icmp6_xlate_egress(struct __sk_buff *skb)
{
	__u32 off = ETH_HLEN + sizeof(struct ipv6hdr);
	struct ipv6hdr outer;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &outer, sizeof(outer)) < 0 || outer.nexthdr != IPPROTO_ICMPV6_)
		return 0;
	struct icmphdr ih;
	if (bpf_skb_load_bytes(skb, off, &ih, sizeof(ih)) < 0)
		return 0;
	if (ih.type != ICMPV6_DEST_UNREACH_ && ih.type != ICMPV6_PKT_TOOBIG_ && ih.type != ICMPV6_TIME_EXCEED_)
		return 0;
	__u32 in_ip = off + sizeof(struct icmphdr);
	struct ipv6hdr inner;
	if (bpf_skb_load_bytes(skb, in_ip, &inner, sizeof(inner)) < 0)
		return 0;
	if (inner.nexthdr != IPPROTO_TCP && inner.nexthdr != IPPROTO_UDP)
		return 0;
	__u32 in_l4 = in_ip + sizeof(struct ipv6hdr);
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)) < 0)
		return 0;
	__u32 qsrc[4], qdst[4], osrc[4], odst[4];
	__builtin_memcpy(qsrc, &inner.saddr, 16);
	__builtin_memcpy(qdst, &inner.daddr, 16);
	__builtin_memcpy(osrc, &outer.saddr, 16);
	__builtin_memcpy(odst, &outer.daddr, 16);
	/* Quoted: client → backend. Must be about the client we send it to. */
	if (qsrc[0] != odst[0] || qsrc[1] != odst[1] || qsrc[2] != odst[2] || qsrc[3] != odst[3])
		return 0;
	struct ct_key6 k = { .sport = ports[0], .dport = ports[1], .proto = inner.nexthdr, .dir = CT_EGRESS };
	__builtin_memcpy(k.saddr, qsrc, 16);
	__builtin_memcpy(k.daddr, qdst, 16);
	struct ct_entry *e = bpf_map_lookup_elem(&ct6, &k);
	if (!e)
		return 0;
	__u32 vip[4];
	__builtin_memcpy(vip, e->nat_addr, 16);
	__be16 vport = e->nat_port;
	__u32 csum = off + offsetof(struct icmphdr, checksum);
	__s64 diff = bpf_csum_diff(qdst, 16, vip, 16, 0);
	if (diff < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, csum, 0, (__u64)diff, 0) < 0 || bpf_l4_csum_replace(skb, csum, ports[1], vport, 2) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, in_ip + offsetof(struct ipv6hdr, daddr), vip, 16, 0) < 0 ||
	    bpf_skb_store_bytes(skb, in_l4 + 2, &vport, 2, 0) < 0)
		return -1;
	/* The backend itself reports: its address becomes the VIP (a router on the way keeps its own). */
	if (osrc[0] == qdst[0] && osrc[1] == qdst[1] && osrc[2] == qdst[2] && osrc[3] == qdst[3]) {
		if (bpf_l4_csum_replace(skb, csum, 0, (__u64)diff, BPF_F_PSEUDO_HDR) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, IP6_SRC_OFF, vip, 16, 0) < 0)
			return -1;
	}
	count(ST_ICMP_XLATE);
	return 1;
}

static __always_inline int lb6_egress(struct __sk_buff *skb)
{
	__u32 baddr[4], client[4];
	__u8 hlim = 0;
	struct l4_info l4 = {};
	int rc = parse6(skb, baddr, client, &hlim, &l4);
	if (rc == 1) {
		if (icmp6_xlate_egress(skb) < 0)
			return TC_ACT_SHOT;
		return PASS;
	}
	if (rc != 0)
		return PASS;
	struct ct_key6 ekey = { .sport = l4.dport, .dport = l4.sport, .proto = l4.proto, .dir = CT_EGRESS };
	__builtin_memcpy(ekey.saddr, client, 16);
	__builtin_memcpy(ekey.daddr, baddr, 16);
	struct ct_entry *e = bpf_map_lookup_elem(&ct6, &ekey);
	if (!e)
		return PASS;
	ct_touch_reply(e, l4.proto, l4.tcpflags, skb->len);
	__u32 vip[4];
	__builtin_memcpy(vip, e->nat_addr, 16);
	__be16 vport = e->nat_port;
	if (rewrite6(skb, &l4, 0, baddr, vip, l4.sport, vport) < 0)
		return TC_ACT_SHOT;
	count(ST_REVNAT);
	return PASS;
}

static __always_inline int is_ipv6(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	return (void *)(eth + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IPV6);
}

static __attribute__((noinline)) int lb4_ingress(struct __sk_buff *skb);
#define LB4_ICMP_SNAT 0x10001 /* lb4_ingress: an ICMP error to the node's IPv4 SNAT address */

static __attribute__((noinline)) int icmp_snat4_ingress(struct __sk_buff *skb)
{
	__be32 src = 0, dst = 0;
	__u32 off = icmp4_offset(skb, &src, &dst);
	if (!off)
		return PASS;
	return icmp_snat4(skb, off, src, dst);
}

SEC("tc")
int herald_lb_ingress(struct __sk_buff *skb)
{
	if (is_ipv6(skb)) {
		int rc = lb6_ingress(skb);
		if (rc == LB6_SNAT_REPLY)
			return snat6_ingress(skb);
		if (rc == LB6_ICMP_VIP)
			return icmp6_vip_ingress(skb);
		return rc == LB6_ICMP_SNAT ? icmp6_snat_ingress(skb) : rc;
	}
	int rc = lb4_ingress(skb);
	return rc == LB4_ICMP_SNAT ? icmp_snat4_ingress(skb) : rc;
}

static __attribute__((noinline)) int lb4_ingress(struct __sk_buff *skb)
{
	struct iphdr *ip = 0;
	struct l4_info l4 = {};
	int rc = parse4(skb, &ip, &l4);
	if (rc == 1 || !ip) {
		__be32 src = 0, dst = 0;
		__u32 off = icmp4_offset(skb, &src, &dst);
		/* To a VIP we balance: the quoted packet is a reply we sent to `src`. */
		if (off) {
			__be32 snat4 = (__be32)cfg(CFG_SNAT_ADDR4, 0);
			if (snat4 && dst == snat4)
				return LB4_ICMP_SNAT; /* about a connection we SNATed: the caller runs icmp_snat4 in its own frame */
			struct lb4_key marker = { .vip = dst };
			if (bpf_map_lookup_elem(&lb4_services, &marker) && icmp_xlate4(skb, off, src, dst, 0) < 0)
				return TC_ACT_SHOT;
		}
		return PASS;
	}
	/* Read what we need now: helpers below invalidate packet pointers. */
	__be32 saddr = ip->saddr, vip = ip->daddr;
	__u8 tos = ip->tos, ttl = ip->ttl;
	__u16 tot_len = bpf_ntohs(ip->tot_len);
	if (rc != 0) {
		if (rc == 3)
			return PASS; /* truncated: never touched, the kernel drops it */
		/* A fragment carries no ports (or only the first does): one sent to a
		 * VIP we balance (marker entry {vip, 0, 0}) is dropped and counted. */
		struct lb4_key marker = { .vip = vip };
		if (!bpf_map_lookup_elem(&lb4_services, &marker))
			return PASS;
		count(ST_FRAGMENT);
		return TC_ACT_SHOT;
	}
	struct lb4_key sk = { .vip = vip, .port = l4.dport, .proto = l4.proto };
	struct lb_service *svc = bpf_map_lookup_elem(&lb4_services, &sk);
	__be32 snat = (__be32)cfg(CFG_SNAT_ADDR4, 0);
	if (!svc) {
		if (snat && vip == snat)
			return snat_reply4(skb, &l4, saddr, vip, tos, tot_len, ttl);
		return PASS;
	}
	__u32 service_id = svc->id;
	int do_snat = svc->flags & LB_SVC_F_SNAT;
	if (do_snat && !snat) {
		count(ST_NO_BACKEND); /* an SNAT service without --lb-snat-address */
		return TC_ACT_SHOT;
	}
	__u64 now = bpf_ktime_get_ns();

	/* 1. Which backend: the connection's, else Maglev. */
	struct ct_key4 skey = { .saddr = saddr, .daddr = vip, .sport = l4.sport, .dport = l4.dport, .proto = l4.proto, .dir = CT_SERVICE };
	struct ct_entry *sent = bpf_map_lookup_elem(&ct4, &skey);
	struct lb_backend *be = 0;
	__u32 backend_id = 0;
	if (sent) {
		backend_id = sent->backend_id;
		be = bpf_map_lookup_elem(&lb_backends, &backend_id);
		if (!be) {
			/* Its backend is gone: a new choice for this flow. */
			ct_delete(&ct4, &skey);
			sent = 0;
		}
	}
	if (!sent) {
		if (svc->backends == 0) {
			count(ST_NO_BACKEND);
			return TC_ACT_SHOT;
		}
		__u32 timeout_s = svc->affinity_timeout_s;
		struct affinity_key4 akey = { .client = saddr, .service_id = service_id };
		backend_id = timeout_s ? affinity_get(&lb4_affinity, &akey, timeout_s, now) : 0;
		if (!backend_id)
			backend_id = pick_backend(svc, service_id, flow_hash4(saddr, vip, l4.sport, l4.dport, l4.proto));
		be = backend_id ? bpf_map_lookup_elem(&lb_backends, &backend_id) : 0;
		if (!be || be->family != 4) {
			count(ST_NO_BACKEND);
			return TC_ACT_SHOT;
		}
		if (timeout_s)
			affinity_set(&lb4_affinity, &akey, backend_id, now);
	}
	if (!be)
		return TC_ACT_SHOT;
	__be32 baddr = *(__be32 *)be->addr;
	__be16 bport = be->port;

	/* DSR: the packet goes to the backend's MAC unchanged (VIP and port kept); the reply
	 * bypasses us. The CT_SERVICE entry keeps the connection on its backend. */
	if (svc->flags & LB_SVC_F_DSR) {
		__u64 dlife = lifetime(l4.proto, l4.proto == IPPROTO_TCP ? tcp_flags_to_ct(l4.tcpflags, 0) | CT_F_ESTABLISHED : 0);
		ct_touch_service(&ct4, sent, &skey, backend_id, service_id, be->addr, bport, 0, skb->len, now, dlife);
		struct bpf_fib_lookup fib = {};
		fib.family = AF_INET_;
		fib.l4_protocol = l4.proto;
		fib.tot_len = tot_len;
		fib.ipv4_src = saddr;
		fib.ipv4_dst = baddr;
		fib.ifindex = skb->ingress_ifindex;
		long frc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
		count(ST_FORWARDED);
		if (frc == BPF_FIB_LKUP_RET_NO_NEIGH) {
			/* Resolve the backend's MAC with the kernel's neighbour table; the IP header stays. */
			struct bpf_redir_neigh nh = { .nh_family = AF_INET_, .ipv4_nh = baddr };
			return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
		}
		if (frc != BPF_FIB_LKUP_RET_SUCCESS) {
			count(ST_FIB_PASS);
			return TC_ACT_SHOT; /* no route to the backend: the VIP cannot be delivered as is */
		}
		if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) < 0 || bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0) < 0)
			return TC_ACT_SHOT;
		return bpf_redirect(fib.ifindex, 0);
	}

	/* 2. The connection entry after DNAT: state, counters, what the reply gets back. */
	struct ct_key4 ekey = { .saddr = saddr, .daddr = baddr, .sport = l4.sport, .dport = bport, .proto = l4.proto, .dir = CT_EGRESS };
	struct ct_entry *eent = bpf_map_lookup_elem(&ct4, &ekey);
	__u16 tf = l4.proto == IPPROTO_TCP ? tcp_flags_to_ct(l4.tcpflags, 0) : 0;
	__u64 life;
	__be16 snat_port = 0;
	if (eent) {
		__u16 f = eent->flags | tf;
		/* A new SYN on a closed tuple starts a fresh connection. */
		if (l4.proto == IPPROTO_TCP && (l4.tcpflags & 0x12) == 0x02 && (eent->flags & (CT_F_TX_CLOSING | CT_F_RX_CLOSING)))
			f = CT_F_SYN_SEEN;
		eent->flags = f;
		life = lifetime(l4.proto, f);
		eent->expires_ns = now + life;
		__sync_fetch_and_add(&eent->packets_fwd, 1);
		__sync_fetch_and_add(&eent->bytes_fwd, skb->len);
		snat_port = eent->snat_port;
		if (do_snat && snat_port) {
			/* The NAT entry lives exactly as long as its connection. */
			struct ct_key4 rkey = { .saddr = baddr, .daddr = snat, .sport = bport, .dport = snat_port, .proto = l4.proto, .dir = CT_SNAT };
			struct ct_entry *r = bpf_map_lookup_elem(&ct4, &rkey);
			if (r)
				r->expires_ns = now + life;
			else
				snat_port = 0; /* evicted: allocate again below */
		}
	}
	if (do_snat && !snat_port) {
		life = lifetime(l4.proto, eent ? eent->flags : tf);
		snat_port = snat_alloc4(baddr, bport, snat, l4.proto, saddr, l4.sport, backend_id, service_id,
					flow_hash4(saddr, vip, l4.sport, l4.dport, l4.proto), now + life);
		if (!snat_port)
			return TC_ACT_SHOT; /* counted: snat_exhausted or ct_full */
		if (eent)
			eent->snat_port = snat_port;
	}
	if (!eent) {
		__u8 vaddr[16] = {};
		*(__be32 *)vaddr = vip;
		life = lifetime(l4.proto, tf);
		struct ct_entry *e = ct_build(backend_id, service_id, vaddr, l4.dport, tf, 1, skb->len, now, now + life, snat_port);
		if (e)
			ct_create(&ct4, &ekey, e);
	}
	ct_touch_service(&ct4, sent, &skey, backend_id, service_id, be->addr, bport, tf, skb->len, now, life);

	/* 3. DNAT (and SNAT). */
	if (rewrite4(skb, &l4, 1, vip, baddr, l4.dport, bport) < 0)
		return TC_ACT_SHOT;
	if (do_snat) {
		if (rewrite4(skb, &l4, 0, saddr, snat, l4.sport, snat_port) < 0)
			return TC_ACT_SHOT;
		count(ST_FORWARDED);
		return forward4(skb, snat, baddr, tos, l4.proto, tot_len, ttl);
	}

	/* 4. Forward: the FIB says where; else the kernel routes it. */
	count(ST_FORWARDED);
	return forward4(skb, saddr, baddr, tos, l4.proto, tot_len, ttl);
}

SEC("tc")
int herald_lb_egress(struct __sk_buff *skb)
{
	if (is_ipv6(skb))
		return lb6_egress(skb);
	struct iphdr *ip = 0;
	struct l4_info l4 = {};
	if (parse4(skb, &ip, &l4) != 0 || !ip) {
		__be32 src = 0, dst = 0;
		__u32 off = icmp4_offset(skb, &src, &dst);
		if (off && icmp_xlate4(skb, off, src, dst, 1) < 0)
			return TC_ACT_SHOT;
		return PASS;
	}
	__be32 baddr = ip->saddr, client = ip->daddr;
	/* The reply's tuple, turned around: the connection as the client opened it after DNAT. */
	struct ct_key4 ekey = { .saddr = client, .daddr = baddr, .sport = l4.dport, .dport = l4.sport, .proto = l4.proto, .dir = CT_EGRESS };
	struct ct_entry *e = bpf_map_lookup_elem(&ct4, &ekey);
	if (!e)
		return PASS;
	ct_touch_reply(e, l4.proto, l4.tcpflags, skb->len);
	__be32 vip = *(__be32 *)e->nat_addr;
	__be16 vport = e->nat_port;
	if (rewrite4(skb, &l4, 0, baddr, vip, l4.sport, vport) < 0)
		return TC_ACT_SHOT;
	count(ST_REVNAT);
	return PASS;
}

/* ---------------------------------------------------------------------------
 * XDP (opt-in, `--lb-xdp`): the hot path of DNAT services — the forward
 * packets of new and tracked IPv4/IPv6 TCP/UDP flows — handled before an skb
 * exists, with the SAME maps as the tc program (services, Maglev tables, ct4/6,
 * affinity, counters), so a flow the one starts the other continues.
 * Everything else is passed up untouched (XDP_PASS) for the tc programs to
 * handle as without XDP: ARP/NDP, SNAT and DSR services, SNAT replies,
 * fragments, IPv4 options, IPv6 extension headers, ICMP, TTL/hop limit ≤ 1,
 * a flow whose backend is gone, no backend, and every packet to a service IP
 * the service policy polices (its own pinned svc_v4/svc_v6 maps, shared here
 * as pol_svc_v4/pol_svc_v6: the policy runs at tc ingress before the load
 * balancer and XDP must never bypass it). Nothing is written before the
 * packet is known to be sent on: the backend is chosen, the FIB asked, the
 * egress checked (the ingress interface: XDP_TX; else it must be in
 * lb_xdp_targets, the interfaces the operator said accept XDP frames), and
 * only then the connection state written and the packet rewritten, its
 * checksums updated incrementally (RFC 1624).
 * ------------------------------------------------------------------------- */

/* The service policy's svc_v4 / svc_v6 (bpf/policy.bpf.c): the same pinned maps. */
struct pol_svc_val { /* must stay policy.bpf.c's struct svc_val: whichever loads first creates the pinned map */
	__u32 slot;
	__u32 svc_id;
	__u64 gen;
};
struct pol_svc_key6 {
	__u8 ip6[16];
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct pol_svc_val);
	__uint(max_entries, 65536);
} pol_svc_v4 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct pol_svc_key6);
	__type(value, struct pol_svc_val);
	__uint(max_entries, 65536);
} pol_svc_v6 SEC(".maps");

/* Where a TCP or UDP header at l4 keeps its checksum and destination port (bounds-checked; -1: truncated). */
static __always_inline int xdp_l4_fields(void *l4, void *data_end, __u8 proto, __u16 **csum, __be16 **dport)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return -1;
		*csum = (__u16 *)&th->check;
		*dport = &th->dest;
	} else {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return -1;
		*csum = (__u16 *)&uh->check;
		*dport = &uh->dest;
	}
	return 0;
}

/* Interfaces XDP may redirect to (ifindex → ifindex). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 256);
} lb_xdp_targets SEC(".maps");

static __always_inline __u16 csum16_add(__u16 a, __u16 b)
{
	__u16 r = a + b;
	return r + (r < b);
}

/* RFC 1624 eqn. 3 on raw 16-bit words (byte order does not matter when all are read alike). */
static __always_inline __u16 csum_replace2(__u16 check, __u16 from, __u16 to)
{
	return (__u16)~csum16_add(csum16_add((__u16)~check, (__u16)~from), to);
}

static __always_inline __u16 csum_replace_words(__u16 check, const __u16 *from, const __u16 *to, int words)
{
#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i < words)
			check = csum_replace2(check, from[i], to[i]);
	return check;
}

/* A new flow's backend without side effects (round robin's counter steps in pick_commit). */
static __always_inline __u32 pick_peek(struct lb_service *svc, __u32 service_id, __u32 hash)
{
	if (!(svc->flags & (LB_SVC_F_RANDOM | LB_SVC_F_RR)))
		return maglev_pick(service_id, hash);
	__u32 n = svc->backends;
	if (n == 0)
		return 0;
	__u32 i = (svc->flags & LB_SVC_F_RR) ? svc->rr_next : bpf_get_prandom_u32();
	void *table = bpf_map_lookup_elem(&lb_maglev, &service_id);
	if (!table)
		return 0;
	__u32 idx = i % n;
	__u32 *id = bpf_map_lookup_elem(table, &idx);
	return id ? *id : 0;
}

/* The XDP path's one decision, per family: where the packet goes (0: not ours to send, pass). */
struct xdp_plan {
	__u32 backend_id;
	__u32 service_id;
	__u32 out_ifindex;
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	int tx;
};

static __always_inline int xdp_egress_ok(struct xdp_md *ctx, struct bpf_fib_lookup *fib, long frc, struct xdp_plan *p)
{
	if (frc != BPF_FIB_LKUP_RET_SUCCESS)
		return 0;
	p->tx = fib->ifindex == ctx->ingress_ifindex;
	if (!p->tx && !bpf_map_lookup_elem(&lb_xdp_targets, &fib->ifindex))
		return 0;
	p->out_ifindex = fib->ifindex;
	__builtin_memcpy(p->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(p->smac, fib->smac, ETH_ALEN);
	return 1;
}

/* The connection state the tc path writes for a forward packet of a DNAT service (its steps 1 and 2). */
static __always_inline void xdp_ct_forward(void *map, void *skey, struct ct_entry *sent, void *ekey, struct lb_service *svc,
					   struct lb_backend *be, struct xdp_plan *p, const void *vaddr16, __be16 vport, __u8 proto,
					   __u8 tcpflags, __u32 len, __u64 now, void *akey, void *amap)
{
	if (!sent) {
		if (svc->flags & LB_SVC_F_RR)
			__sync_fetch_and_add(&svc->rr_next, 1);
		if (svc->affinity_timeout_s)
			affinity_set(amap, akey, p->backend_id, now);
	}
	struct ct_entry *eent = bpf_map_lookup_elem(map, ekey);
	__u16 tf = proto == IPPROTO_TCP ? tcp_flags_to_ct(tcpflags, 0) : 0;
	__u64 life;
	if (eent) {
		__u16 f = eent->flags | tf;
		if (proto == IPPROTO_TCP && (tcpflags & 0x12) == 0x02 && (eent->flags & (CT_F_TX_CLOSING | CT_F_RX_CLOSING)))
			f = CT_F_SYN_SEEN;
		eent->flags = f;
		life = lifetime(proto, f);
		eent->expires_ns = now + life;
		__sync_fetch_and_add(&eent->packets_fwd, 1);
		__sync_fetch_and_add(&eent->bytes_fwd, len);
	} else {
		life = lifetime(proto, tf);
		struct ct_entry *e = ct_build(p->backend_id, p->service_id, vaddr16, vport, tf, 1, len, now, now + life, 0);
		if (e)
			ct_create(map, ekey, e);
	}
	ct_touch_service(map, sent, skey, p->backend_id, p->service_id, be->addr, be->port, tf, len, now, life);
}

static __always_inline int xdp_send(struct ethhdr *eth, struct xdp_plan *p)
{
	__builtin_memcpy(eth->h_dest, p->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->smac, ETH_ALEN);
	count(ST_FORWARDED);
	count(ST_XDP_FORWARDED);
	if (p->tx)
		return XDP_TX;
	return bpf_redirect_map(&lb_xdp_targets, p->out_ifindex, 0);
}

static __always_inline int xdp_pass_counted(void)
{
	count(ST_XDP_PASS);
	return XDP_PASS;
}

static __attribute__((noinline)) int xdp_lb4(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	if (ip->version != 4 || ip->ihl != 5 || (ip->frag_off & bpf_htons(IP_MF_ | IP_OFFSET_)))
		return XDP_PASS; /* options, fragments: tc */
	if ((ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP) || ip->ttl <= 1)
		return XDP_PASS;
	struct l4_info l4 = {};
	if (parse_ports(data, data_end, ETH_HLEN + sizeof(struct iphdr), ip->protocol, &l4))
		return XDP_PASS;
	__be32 saddr = ip->saddr, vip = ip->daddr;
	struct lb4_key sk = { .vip = vip, .port = l4.dport, .proto = l4.proto };
	struct lb_service *svc = bpf_map_lookup_elem(&lb4_services, &sk);
	if (!svc || (svc->flags & (LB_SVC_F_SNAT | LB_SVC_F_DSR)) || svc->backends == 0)
		return XDP_PASS;
	if (bpf_map_lookup_elem(&pol_svc_v4, &vip))
		return XDP_PASS; /* a policed service IP: the policy at tc decides first */
	struct xdp_plan p = { .service_id = svc->id };
	__u64 now = bpf_ktime_get_ns();
	struct ct_key4 skey = { .saddr = saddr, .daddr = vip, .sport = l4.sport, .dport = l4.dport, .proto = l4.proto, .dir = CT_SERVICE };
	struct ct_entry *sent = bpf_map_lookup_elem(&ct4, &skey);
	struct affinity_key4 akey = { .client = saddr, .service_id = p.service_id };
	if (sent) {
		p.backend_id = sent->backend_id;
	} else {
		__u32 timeout_s = svc->affinity_timeout_s;
		p.backend_id = timeout_s ? affinity_get(&lb4_affinity, &akey, timeout_s, now) : 0;
		if (!p.backend_id)
			p.backend_id = pick_peek(svc, p.service_id, flow_hash4(saddr, vip, l4.sport, l4.dport, l4.proto));
	}
	struct lb_backend *be = bpf_map_lookup_elem(&lb_backends, &p.backend_id);
	if (!be || be->family != 4)
		return XDP_PASS; /* gone (tc re-picks and deletes) or none: tc counts it */
	__be32 baddr = *(__be32 *)be->addr;
	__be16 bport = be->port;
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET_;
	fib.tos = ip->tos;
	fib.l4_protocol = l4.proto;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = saddr;
	fib.ipv4_dst = baddr;
	fib.ifindex = ctx->ingress_ifindex;
	long frc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (!xdp_egress_ok(ctx, &fib, frc, &p))
		return xdp_pass_counted();
	__u32 len = (__u32)(data_end - data);
	struct ct_key4 ekey = { .saddr = saddr, .daddr = baddr, .sport = l4.sport, .dport = bport, .proto = l4.proto, .dir = CT_EGRESS };
	__u8 vaddr[16] = {};
	*(__be32 *)vaddr = vip;
	xdp_ct_forward(&ct4, &skey, sent, &ekey, svc, be, &p, vaddr, l4.dport, l4.proto, l4.tcpflags, len, now, &akey, &lb4_affinity);

	/* DNAT + TTL, checksums incrementally. Pointers again from ctx (the verifier's view after the calls). */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return XDP_DROP;
	__u16 csum = ip->check;
	__u16 oldttl = *(__u16 *)&ip->ttl;
	ip->ttl--;
	csum = csum_replace2(csum, oldttl, *(__u16 *)&ip->ttl);
	csum = csum_replace_words(csum, (__u16 *)&vip, (__u16 *)&baddr, 2);
	ip->check = csum;
	ip->daddr = baddr;
	__u16 *l4csum;
	__be16 *dport;
	if (xdp_l4_fields((void *)(ip + 1), data_end, l4.proto, &l4csum, &dport))
		return XDP_DROP;
	__u16 c = *l4csum;
	if (l4.proto == IPPROTO_TCP || c != 0) { /* UDP without a checksum keeps none */
		c = csum_replace_words(c, (__u16 *)&vip, (__u16 *)&baddr, 2);
		c = csum_replace2(c, l4.dport, bport);
		if (l4.proto == IPPROTO_UDP && c == 0)
			c = 0xffff;
		*l4csum = c;
	}
	*dport = bport;
	return xdp_send(eth, &p);
}

static __attribute__((noinline)) int xdp_lb6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > data_end)
		return XDP_PASS;
	if (ip6->version != 6 || (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP) || ip6->hop_limit <= 1)
		return XDP_PASS; /* extension headers (fragments too), ICMPv6/NDP: tc */
	struct l4_info l4 = {};
	if (parse_ports(data, data_end, ETH_HLEN + sizeof(struct ipv6hdr), ip6->nexthdr, &l4))
		return XDP_PASS;
	struct lb6_key sk = { .port = l4.dport, .proto = l4.proto };
	__builtin_memcpy(sk.vip, &ip6->daddr, 16);
	struct lb_service *svc = bpf_map_lookup_elem(&lb6_services, &sk);
	if (!svc || (svc->flags & (LB_SVC_F_SNAT | LB_SVC_F_DSR)) || svc->backends == 0)
		return XDP_PASS;
	if (bpf_map_lookup_elem(&pol_svc_v6, sk.vip))
		return XDP_PASS; /* a policed service IP: the policy at tc decides first */
	struct xdp_plan p = { .service_id = svc->id };
	__u64 now = bpf_ktime_get_ns();
	struct ct_key6 skey = { .sport = l4.sport, .dport = l4.dport, .proto = l4.proto, .dir = CT_SERVICE };
	__builtin_memcpy(skey.saddr, &ip6->saddr, 16);
	__builtin_memcpy(skey.daddr, sk.vip, 16);
	struct ct_entry *sent = bpf_map_lookup_elem(&ct6, &skey);
	struct affinity_key6 akey = { .service_id = p.service_id };
	__builtin_memcpy(akey.client, skey.saddr, 16);
	if (sent) {
		p.backend_id = sent->backend_id;
	} else {
		__u32 timeout_s = svc->affinity_timeout_s;
		p.backend_id = timeout_s ? affinity_get(&lb6_affinity, &akey, timeout_s, now) : 0;
		if (!p.backend_id)
			p.backend_id = pick_peek(svc, p.service_id,
						 flow_hash6((__u32 *)skey.saddr, (__u32 *)skey.daddr, l4.sport, l4.dport, l4.proto));
	}
	struct lb_backend *be = bpf_map_lookup_elem(&lb_backends, &p.backend_id);
	if (!be || be->family != 6)
		return XDP_PASS;
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6_;
	fib.l4_protocol = l4.proto;
	fib.tot_len = bpf_ntohs(ip6->payload_len) + sizeof(struct ipv6hdr);
	__builtin_memcpy(fib.ipv6_src, skey.saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, be->addr, 16);
	fib.ifindex = ctx->ingress_ifindex;
	long frc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (!xdp_egress_ok(ctx, &fib, frc, &p))
		return xdp_pass_counted();
	__u32 len = (__u32)(data_end - data);
	struct ct_key6 ekey = { .sport = l4.sport, .dport = be->port, .proto = l4.proto, .dir = CT_EGRESS };
	__builtin_memcpy(ekey.saddr, skey.saddr, 16);
	__builtin_memcpy(ekey.daddr, be->addr, 16);
	xdp_ct_forward(&ct6, &skey, sent, &ekey, svc, be, &p, sk.vip, l4.dport, l4.proto, l4.tcpflags, len, now, &akey, &lb6_affinity);

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > data_end)
		return XDP_DROP;
	__be16 bport = be->port;
	ip6->hop_limit--;
	__u16 *l4csum;
	__be16 *dport;
	if (xdp_l4_fields((void *)(ip6 + 1), data_end, l4.proto, &l4csum, &dport))
		return XDP_DROP;
	__u16 c = csum_replace_words(*l4csum, (__u16 *)sk.vip, (__u16 *)be->addr, 8);
	c = csum_replace2(c, l4.dport, bport);
	if (l4.proto == IPPROTO_UDP && c == 0)
		c = 0xffff; /* IPv6 UDP: zero means none */
	*l4csum = c;
	*dport = bport;
	__builtin_memcpy(&ip6->daddr, be->addr, 16);
	return xdp_send(eth, &p);
}

SEC("xdp")
int herald_lb_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return xdp_lb4(ctx);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return xdp_lb6(ctx);
	return XDP_PASS; /* ARP and the rest: tc */
}

char LICENSE[] SEC("license") = "GPL";
