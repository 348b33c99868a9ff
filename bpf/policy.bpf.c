// SPDX-License-Identifier: GPL-2.0
/*
 * herald service traffic policy: who may reach which service IP and port.
 * tc ingress, priority 2 (after the L2 responder at priority 1, before the L4
 * load balancer at priority 3).
 *
 *   svc_v4 / svc_v6   service IP -> { slot, svc_id }. A destination not in
 *                     these maps is not a policed service: TC_ACT_UNSPEC.
 *   lpm_v4 / lpm_v6   LPM tries keyed by (slot, source prefix). The value is
 *                     the ordered L4 entry list of every rule that matches
 *                     the addresses whose longest match is that prefix.
 *   drops             per-CPU packet counts per (svc_id, rule) of drops;
 *                     rule 0 = default deny (selected, nothing allowed).
 *
 *   vcache            per-CPU, direct-mapped verdict cache (VC_SLOTS entries
 *                     per CPU): (svc_id, family, source, protocol, L4 key)
 *                     -> the verdict and rule, stamped with the generation
 *                     of the service's rule set it was computed from. The
 *                     common case — more packets of a flow already decided
 *                     — costs one probe instead of the LPM walk (whose depth
 *                     grows with the number of prefixes). An entry answers
 *                     only while its stamp equals the svc entry's `gen`: the
 *                     agent gives every revision it flips to a generation
 *                     never used before (a pinned high-water mark carries
 *                     them across restarts), so a new revision is never
 *                     answered from an old verdict. Not pinned: a new
 *                     program starts with an empty cache.
 *   frags             LRU: (family, proto, fragment id, src, dst) -> the
 *                     L4 key of a fragmented datagram's first fragment, so
 *                     its later fragments (no L4 header) are decided as the
 *                     first one was. A later fragment seen before its first
 *                     (or after the entry was evicted) has no known L4 key:
 *                     only rules without ports can match it.
 *
 * The L4 key of a packet is its destination port (TCP, UDP, SCTP) or its
 * ICMP type (ICMP in IPv4, ICMPv6 in IPv6): an entry with proto ICMP and
 * lo..hi = type is an `icmps` rule.
 *
 * IPv6 extension headers (hop-by-hop, routing, destination options, AH,
 * fragment) are walked, at most MAX_EXT of them; a longer chain, or one cut
 * short by the packet's end, is dropped (default deny) rather than guessed.
 *
 * Verdict: the first matching entry decides (the compiler puts deny entries
 * first, each class by rule id), no match = default deny. Allowed traffic
 * and everything unrelated passes on with TC_ACT_UNSPEC, so later filters
 * and the stack see it. ARP is not IP and never reaches the policy; Neighbor
 * Discovery (ICMPv6 133-137, after any extension headers) is always passed: policy is about traffic to a
 * service, not about the reachability of its address.
 *
 * Hitless revisions: each service owns two slots (svc_id*2 and svc_id*2+1).
 * The agent writes the next revision into the idle slot, then flips the
 * service's svc_v4/svc_v6 value to it with one map update. A packet sees
 * either the whole old rule set or the whole new one.
 *
 * Shared with src/datapath/policy/layout.ts: keep in sync.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define PASS TC_ACT_UNSPEC
#define MAX_L4 16
#define F_DENY 1 /* entry denies (else allows) */
#define F_ANY 2  /* entry matches every packet (rule without toPorts) */
#define IPPROTO_SCTP_ 132
#define IPPROTO_ICMPV6_ 58
#define IPPROTO_ICMP_ 1
#define MAX_EXT 8 /* IPv6 extension headers walked */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60

struct svc_key6 {
	__u8 ip6[16];
};

struct svc_val {
	__u32 slot;   /* LPM slot of the revision in force */
	__u32 svc_id; /* counter key */
	__u64 gen;    /* generation of that revision: unique across revisions and runs */
};

#define VC_SLOTS 4096 /* verdict cache entries per CPU (power of two) */
#define VC_HAS_L4 1
#define VC_V6 2

struct vc_entry {
	__u32 seq;    /* odd while being written */
	__u32 svc_id;
	__u64 gen;    /* svc_val.gen the verdict was computed under; 0 = empty */
	__u64 src[2]; /* source address (IPv4: first 4 bytes, rest zero) */
	__u16 l4;     /* L4 key (port or ICMP type) */
	__u8 proto;
	__u8 kind;    /* VC_HAS_L4 | VC_V6 */
	__u32 rule;   /* deciding rule (0 = default deny) */
	__u32 deny;
	__u32 pad;
};

struct lpm_key4 {
	__u32 prefixlen; /* 32 (slot) + source prefix length */
	__u32 slot;
	__u32 addr;
};

struct lpm_key6 {
	__u32 prefixlen; /* 32 (slot) + source prefix length */
	__u32 slot;
	__u8 addr[16];
};

struct l4_entry {
	__u8 proto; /* IPPROTO_TCP/UDP/SCTP/ICMP/ICMPV6; unused with F_ANY */
	__u8 flags;
	__u16 lo;   /* L4 key range (port, or ICMP type), host order, inclusive */
	__u16 hi;
	__u16 pad;
	__u32 rule; /* the deciding rule's id, for counters and trace */
};

struct pol_val {
	__u32 n;
	__u32 pad;
	struct l4_entry e[MAX_L4];
};

struct frag_key {
	__u8 family;
	__u8 proto;
	__u16 pad;
	__u32 id; /* IPv4: the 16-bit id; IPv6: the fragment header's id */
	__u8 src[16];
	__u8 dst[16];
};

struct drop_key {
	__u32 svc_id;
	__u32 rule;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32); /* IPv4, network order */
	__type(value, struct svc_val);
	__uint(max_entries, 65536);
} svc_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct svc_key6);
	__type(value, struct svc_val);
	__uint(max_entries, 65536);
} svc_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key4);
	__type(value, struct pol_val);
	__uint(max_entries, 262144);
} lpm_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key6);
	__type(value, struct pol_val);
	__uint(max_entries, 262144);
} lpm_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct drop_key);
	__type(value, __u64);
	__uint(max_entries, 65536);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag_key);
	__type(value, __u16); /* the first fragment's L4 key */
	__uint(max_entries, 16384);
} frags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct vc_entry);
	__uint(max_entries, VC_SLOTS);
} vcache SEC(".maps");

/*
 * The agent's generation high-water mark (pinned; never read here): every
 * generation it has handed out, in this run or an earlier one, is below it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} gen_hw SEC(".maps");

static __always_inline int drop(__u32 svc_id, __u32 rule)
{
	struct drop_key k = { .svc_id = svc_id, .rule = rule };
	__u64 *c = bpf_map_lookup_elem(&drops, &k);
	if (c) {
		*c += 1; /* per-CPU: no atomics needed */
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&drops, &k, &one, BPF_NOEXIST);
	}
	return TC_ACT_SHOT;
}

/*
 * 1 = the packet's L4 key is known: the destination port of TCP/UDP/SCTP
 * (at offset 2 in all three), the type of ICMP (`icmp` = 1 in IPv4, 58 in IPv6).
 */
static __always_inline int read_l4(struct __sk_buff *skb, __u32 off, __u8 proto, __u8 icmp, __u16 *key)
{
	/* The L4 header in the linear data (the common case): read in place, no helper call. */
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	if (off < 4096) {
		__u8 *l4 = data + off;
		if ((void *)(l4 + 4) <= data_end) {
			if (proto == icmp) {
				*key = l4[0];
				return 1;
			}
			if (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP_)
				return 0;
			*key = ((__u16)l4[2] << 8) | l4[3];
			return 1;
		}
	}
	if (proto == icmp) {
		__u8 type;
		if (bpf_skb_load_bytes(skb, off, &type, 1) < 0)
			return 0;
		*key = type;
		return 1;
	}
	__be16 p;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP_)
		return 0;
	if (bpf_skb_load_bytes(skb, off + 2, &p, sizeof(p)) < 0)
		return 0;
	*key = bpf_ntohs(p);
	return 1;
}

/* A fragmented datagram: the first fragment records its L4 key, the later ones look it up. */
static __always_inline int frag_l4(struct frag_key *fk, int first, int has_l4, __u16 *key)
{
	if (first) {
		if (has_l4)
			bpf_map_update_elem(&frags, fk, key, BPF_ANY);
		return has_l4;
	}
	__u16 *k = bpf_map_lookup_elem(&frags, fk);
	if (!k)
		return 0;
	*key = *k;
	return 1;
}

/* The verdict of an entry list: 1 = deny (with *rule), 0 = allow. */
static __always_inline int decide(const struct pol_val *pv, __u8 proto, int has_l4, __u16 dport, __u32 *rule)
{
	*rule = 0;
	if (!pv)
		return 1;
	__u32 n = pv->n;
	for (int i = 0; i < MAX_L4; i++) {
		if (i >= n)
			break;
		const struct l4_entry *e = &pv->e[i];
		int match = (e->flags & F_ANY) ||
			    (has_l4 && e->proto == proto && dport >= e->lo && dport <= e->hi);
		if (!match)
			continue;
		*rule = e->rule;
		return (e->flags & F_DENY) ? 1 : 0;
	}
	return 1;
}

#define BARRIER() asm volatile("" ::: "memory")

/*
 * The cache slot of a (service, source, L4) key: a per-CPU array element, so
 * lookups are inlined and writes need no lock. Only this CPU writes its
 * entries; `seq` (odd while written) keeps a run that interrupted a write on
 * the same CPU from reading or writing a torn entry.
 */
static __always_inline struct vc_entry *vc_slot(__u32 svc_id, const __u64 *src, __u32 l4w)
{
	/* Fibonacci hashing of the folded key: one multiply (a collision only costs a miss). */
	__u64 x = src[0] ^ (src[1] * 0xff51afd7ed558ccdULL) ^ (((__u64)l4w << 32) | svc_id);
	x ^= x >> 29;
	__u32 idx = (__u32)((x * 0x9e3779b97f4a7c15ULL) >> 52) & (VC_SLOTS - 1);
	return bpf_map_lookup_elem(&vcache, &idx);
}

/*
 * The service's verdict for the packet: from the cache when an entry of the
 * same key holds the current generation, else from the LPM trie (then cached).
 */
static __always_inline int verdict(const struct svc_val *sv, void *lpm, const void *lpm_key, const __u64 *src,
				   __u8 kind, __u8 proto, int has_l4, __u16 dport)
{
	__u16 l4 = has_l4 ? dport : 0;
	kind |= has_l4 ? VC_HAS_L4 : 0;
	__u32 l4w = (__u32)l4 | ((__u32)proto << 16) | ((__u32)kind << 24);
	__u32 svc_id = sv->svc_id;
	__u64 gen = sv->gen;
#ifdef HERALD_NO_VCACHE /* bench/policy's comparison build: every packet walks the LPM trie */
	struct vc_entry *e = 0;
#else
	struct vc_entry *e = vc_slot(svc_id, src, l4w);
#endif
	__u32 s = 1;
	if (e) {
		s = *(volatile __u32 *)&e->seq;
		BARRIER();
		if (!(s & 1) && gen != 0 && e->gen == gen && e->svc_id == svc_id && e->src[0] == src[0] && e->src[1] == src[1] &&
		    e->l4 == l4 && e->proto == proto && e->kind == kind) {
			__u32 rule = e->rule, deny = e->deny;
			BARRIER();
			if (*(volatile __u32 *)&e->seq == s)
				return deny ? drop(svc_id, rule) : PASS;
		}
	}
	__u32 rule;
	int deny = decide(bpf_map_lookup_elem(lpm, lpm_key), proto, has_l4, dport, &rule);
	if (e && !(s & 1) && gen != 0) {
		*(volatile __u32 *)&e->seq = s + 1;
		BARRIER();
		e->svc_id = svc_id;
		e->gen = gen;
		e->src[0] = src[0];
		e->src[1] = src[1];
		e->l4 = l4;
		e->proto = proto;
		e->kind = kind;
		e->rule = rule;
		e->deny = deny;
		BARRIER();
		*(volatile __u32 *)&e->seq = s + 2;
	}
	return deny ? drop(svc_id, rule) : PASS;
}

SEC("tc")
int herald_policy(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return PASS;
	__u16 dport = 0;

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return PASS;
		__u32 dst = ip->daddr;
		struct svc_val *sv = bpf_map_lookup_elem(&svc_v4, &dst);
		if (!sv)
			return PASS;
		__u8 proto = ip->protocol;
		__u16 fo = bpf_ntohs(ip->frag_off);
		int first = (fo & 0x1fff) == 0;
		int has_l4 = first && read_l4(skb, ETH_HLEN + ip->ihl * 4, proto, IPPROTO_ICMP_, &dport);
		if (fo & 0x3fff) { /* more fragments, or not the first: a fragment */
			struct frag_key fk = { .family = 4, .proto = proto, .id = ip->id };
			__builtin_memcpy(fk.src, &ip->saddr, 4);
			__builtin_memcpy(fk.dst, &ip->daddr, 4);
			has_l4 = frag_l4(&fk, first, has_l4, &dport);
		}
		struct lpm_key4 k = { .prefixlen = 64, .slot = sv->slot, .addr = ip->saddr };
		__u64 src[2] = { ip->saddr, 0 };
		return verdict(sv, &lpm_v4, &k, src, 0, proto, has_l4, dport);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return PASS;
		struct svc_key6 d;
		__builtin_memcpy(d.ip6, &ip6->daddr, 16);
		struct svc_val *sv = bpf_map_lookup_elem(&svc_v6, &d);
		if (!sv)
			return PASS;
		__u8 proto = ip6->nexthdr;
		__u32 off = ETH_HLEN + sizeof(*ip6);
		int fragment = 0, first = 1;
		__u32 frag_id = 0;
#pragma unroll
		for (int i = 0; i < MAX_EXT; i++) {
			if (proto != NEXTHDR_HOP && proto != NEXTHDR_ROUTING && proto != NEXTHDR_DEST &&
			    proto != NEXTHDR_AUTH && proto != NEXTHDR_FRAGMENT)
				break;
			__u8 h[8];
			if (bpf_skb_load_bytes(skb, off, h, proto == NEXTHDR_FRAGMENT ? 8 : 2) < 0)
				return drop(sv->svc_id, 0); /* cut short: malformed */
			if (proto == NEXTHDR_FRAGMENT) {
				fragment = 1;
				first = ((((__u16)h[2] << 8) | h[3]) & 0xfff8) == 0;
				__builtin_memcpy(&frag_id, &h[4], 4);
				off += 8;
			} else if (proto == NEXTHDR_AUTH) {
				off += ((__u32)h[1] + 2) * 4;
			} else {
				off += ((__u32)h[1] + 1) * 8;
			}
			proto = h[0];
			if (!first)
				break; /* the rest is the middle of a datagram */
		}
		if (first && (proto == NEXTHDR_HOP || proto == NEXTHDR_ROUTING || proto == NEXTHDR_DEST ||
			      proto == NEXTHDR_AUTH || proto == NEXTHDR_FRAGMENT))
			return drop(sv->svc_id, 0); /* more than MAX_EXT extension headers */
		int has_l4 = first && read_l4(skb, off, proto, IPPROTO_ICMPV6_, &dport);
		/* Neighbor Discovery is never filtered (policy is about traffic to a service, not reachability). */
		if (has_l4 && proto == IPPROTO_ICMPV6_ && dport >= 133 && dport <= 137)
			return PASS;
		if (fragment) {
			struct frag_key fk = { .family = 6, .proto = proto, .id = frag_id };
			__builtin_memcpy(fk.src, &ip6->saddr, 16);
			__builtin_memcpy(fk.dst, &ip6->daddr, 16);
			has_l4 = frag_l4(&fk, first, has_l4, &dport);
		}
		struct lpm_key6 k = { .prefixlen = 160, .slot = sv->slot };
		__builtin_memcpy(k.addr, &ip6->saddr, 16);
		__u64 src[2];
		__builtin_memcpy(src, &ip6->saddr, 16);
		return verdict(sv, &lpm_v6, &k, src, VC_V6, proto, has_l4, dport);
	}
	return PASS;
}

char LICENSE[] SEC("license") = "GPL";
