// SPDX-License-Identifier: GPL-2.0
/*
 * herald L2 responder: answers ARP requests (IPv4) and Neighbor Solicitations
 * (IPv6, RFC 4861) for the service IPs this node owns, straight from tc
 * ingress, and counts replies and address conflicts per IP.
 *
 * Stricter than Cilium's responder (bpf/lib/arp.h): the protocol type and both
 * address lengths are checked too, frames from broadcast/multicast sources are
 * never answered, tagged frames on a parent device are left to the VLAN
 * sub-interface, and the liveness gate treats a never-written stamp as dead.
 *
 * A frame from a foreign MAC claiming an IP we answer for is counted and, while
 * the agent is live, reported on the conflict_events ring buffer so the agent
 * re-announces the IP (RFC 5227 defence). The program itself never answers a
 * claim: another host's announcement is not a question.
 * Anything not answered passes on untouched: TC_ACT_UNSPEC lets any later tc
 * filter on the device run, then the kernel stack gets the frame.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_ALEN_ 6
/* From linux/if_arp.h, which drags in libc headers unusable for -target bpf. */
#define ARPHRD_ETHER 1
#define ARPOP_REQUEST 1
#define ARPOP_REPLY 2
#define PASS TC_ACT_UNSPEC
#define ARP_FRAME_LEN (ETH_HLEN + 28) /* Ethernet + ARP for IPv4 over Ethernet */

/* Shared with src/datapath/l2-responder/layout.ts: keep in sync. */
struct responder_key {
	__u32 ip4;     /* network byte order */
	__u32 ifindex; /* the interface the request must arrive on */
};

struct responder_stats {
	__u64 replies;   /* ARP replies sent for this (IP, ifindex) */
	__u64 conflicts; /* ARP frames from a foreign MAC claiming this IP */
};

struct iface_info {
	__u8 mac[ETH_ALEN_]; /* the interface's own MAC: reply source */
	__u8 pad[2];
};

enum runtime_config_slot {
	CONFIG_LIVENESS_NS = 0, /* CLOCK_MONOTONIC ns of the agent's last heartbeat; 0 = never */
	CONFIG_MAX_AGE_NS = 1,  /* heartbeat older than this => the agent is dead, stay silent */
	CONFIG_SLOTS = 2,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct responder_key);
	__type(value, struct responder_stats);
	__uint(max_entries, 65536); /* overridden at load time (--responder-map-size) */
} responder_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32); /* ifindex */
	__type(value, struct iface_info);
	__uint(max_entries, 1024);
} interfaces SEC(".maps");

/* The MACs of the interfaces in `interfaces`, as keys (written with them by
 * the agent; not pinned: a loading agent fills it before it attaches). */
struct mac_key {
	__u8 mac[ETH_ALEN_];
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct mac_key);
	__type(value, __u32); /* unused (1) */
	__uint(max_entries, 1024);
} our_macs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, CONFIG_SLOTS);
} runtime_config SEC(".maps");

/* Shared with src/datapath/l2-responder/layout.ts: keep in sync. */
struct responder_key6 {
	__u8 ip6[16];  /* network byte order */
	__u32 ifindex; /* the interface the solicitation must arrive on */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct responder_key6);
	__type(value, struct responder_stats); /* replies = Neighbor Advertisements sent */
	__uint(max_entries, 65536); /* overridden at load time (--responder-map-size) */
} responder_v6 SEC(".maps");

/* Shared with src/datapath/l2-responder/layout.ts: keep in sync. */
struct conflict_event {
	__u8 family;           /* 4 or 6 */
	__u8 pad;
	__be16 op;             /* ARP opcode, or ICMPv6 type (135 NS, 136 NA), network byte order */
	__u32 ifindex;         /* where the claim arrived */
	__u8 ip[16];           /* the IP claimed, network byte order (IPv4: the first 4 bytes) */
	__u8 sha[ETH_ALEN_];   /* the MAC the claim asks caches to use */
	__u8 pad2[2];
	__u64 ktime_ns;        /* CLOCK_MONOTONIC of the frame */
};

/*
 * Conflicts reach the agent as events on a ring buffer rather than as a
 * per-entry "last conflict" field it would have to poll: the agent learns of a
 * claim within microseconds and defends at once, without scanning a map of up
 * to 65,536 entries on a timer. Not pinned: events are transient, and a
 * restarted agent's program gets a fresh buffer.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} conflict_events SEC(".maps");

/*
 * At most one event per (IP, ifindex) per CONFLICT_REPORT_GAP_NS: a flood of
 * claims must not become a flood of wake-ups in the agent (its event loop also
 * writes the liveness stamp). Every frame is still counted in responder_v4,
 * and the agent re-checks that counter after each defence, so claims that go
 * unreported here are still defended. LRU: bounded, needs no cleanup.
 */
#define CONFLICT_REPORT_GAP_NS (100ULL * 1000 * 1000)
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct responder_key);
	__type(value, __u64); /* ktime of the last event reported */
	__uint(max_entries, 4096);
} conflict_reported SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct responder_key6);
	__type(value, __u64);
	__uint(max_entries, 4096);
} conflict_reported_v6 SEC(".maps");

struct arp_ipv4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[ETH_ALEN_];
	__u8 spa[4]; /* byte arrays: SPA/TPA are not 4-byte aligned in the frame */
	__u8 tha[ETH_ALEN_];
	__u8 tpa[4];
} __attribute__((packed));

static __always_inline int mac_equal(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] &&
	       a[5] == b[5];
}

static __always_inline int mac_is_broadcast(const __u8 *a)
{
	return (a[0] & a[1] & a[2] & a[3] & a[4] & a[5]) == 0xff;
}

static __always_inline int mac_is_multicast(const __u8 *a)
{
	return a[0] & 0x01; /* includes broadcast */
}

static __always_inline int mac_is_zero(const __u8 *a)
{
	return (a[0] | a[1] | a[2] | a[3] | a[4] | a[5]) == 0;
}

static __always_inline __u32 read_ip(const __u8 *p)
{
	__u32 ip;
	__builtin_memcpy(&ip, p, 4);
	return ip;
}

/* The agent is alive when its heartbeat is fresh. Never written (0) = dead. */
static __always_inline int agent_alive(void)
{
	__u32 slot = CONFIG_LIVENESS_NS;
	__u64 *stamp = bpf_map_lookup_elem(&runtime_config, &slot);
	slot = CONFIG_MAX_AGE_NS;
	__u64 *max_age = bpf_map_lookup_elem(&runtime_config, &slot);
	if (!stamp || !max_age || *stamp == 0 || *max_age == 0)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	/* A stamp slightly in the future (written between our read of the clock and
	 * now) is fresh; only an old one is stale. */
	return now <= *stamp || now - *stamp <= *max_age;
}

/*
 * One of this node's MACs: the receiving interface's, or that of any other
 * interface we serve. A node with two interfaces on one segment hears its own
 * announcements on the other one; those are not conflicts (and defending
 * against them would ping-pong forever). One hash lookup: a walk of the
 * interfaces map visited all its 1,024 buckets (~15-30 µs cold) for every
 * frame about an IP we hold, which during a hand-over is every announcement
 * the successors send while the old owner still holds its entries (issue 16).
 */
static __always_inline int mac_is_ours(const __u8 *mac, const struct iface_info *iface)
{
	if (mac_equal(mac, iface->mac))
		return 1;
	struct mac_key k = {};
	__builtin_memcpy(k.mac, mac, ETH_ALEN_);
	return bpf_map_lookup_elem(&our_macs, &k) != 0;
}

/*
 * A claim of an IP we answer for, from a MAC that is not ours: count it, and
 * report it while we are live. The sender IP is looked up first: for almost
 * every frame (other hosts asking about other hosts, or about us) it is not one
 * of ours, and the answer costs one hash lookup. Only a frame whose sender IP
 * we announce pays mac_is_ours() too (when it walked the interfaces map, doing
 * it on every request made an answer on a quiet wire 3.4x slower than the
 * kernel's: issue 16, bench/arp idle).
 */
static __always_inline void note_conflict(__u32 spa, __u32 ifindex, const struct arp_ipv4 *arp,
					  const struct iface_info *iface)
{
	struct responder_key key = { .ip4 = spa, .ifindex = ifindex };
	struct responder_stats *stats = bpf_map_lookup_elem(&responder_v4, &key);
	if (!stats)
		return;
	if (mac_is_ours(arp->sha, iface))
		return; /* our own announcement, heard back (e.g. on a second interface) */
	__sync_fetch_and_add(&stats->conflicts, 1);
	if (!agent_alive())
		return; /* the same gate as answering: a dead agent's node stays quiet */
	__u64 now = bpf_ktime_get_ns();
	__u64 *last = bpf_map_lookup_elem(&conflict_reported, &key);
	if (last && now - *last < CONFLICT_REPORT_GAP_NS)
		return;
	bpf_map_update_elem(&conflict_reported, &key, &now, BPF_ANY);
	struct conflict_event *ev = bpf_ringbuf_reserve(&conflict_events, sizeof(*ev), 0);
	if (!ev)
		return; /* buffer full: the counter still has it, the agent re-checks it */
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->family = 4;
	__builtin_memcpy(ev->ip, &spa, 4);
	ev->ifindex = ifindex;
	__builtin_memcpy(ev->sha, arp->sha, ETH_ALEN_);
	ev->op = arp->op;
	ev->ktime_ns = now;
	bpf_ringbuf_submit(ev, 0);
}

static __always_inline int handle_arp(struct __sk_buff *skb, __u32 ifindex, struct iface_info *iface)
{
	if (skb->len < ARP_FRAME_LEN)
		return PASS; /* truncated: never answer */
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	if (data + ARP_FRAME_LEN > data_end) {
		if (bpf_skb_pull_data(skb, ARP_FRAME_LEN) < 0)
			return PASS;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (data + ARP_FRAME_LEN > data_end)
			return PASS;
	}
	struct ethhdr *eth = data;
	struct arp_ipv4 *arp = data + ETH_HLEN;

	if (arp->htype != bpf_htons(ARPHRD_ETHER) || arp->ptype != bpf_htons(ETH_P_IP) ||
	    arp->hlen != ETH_ALEN_ || arp->plen != 4)
		return PASS;

	/* Conflict detection: any ARP frame (request or reply) claiming an IP we
	 * announce on this interface for a MAC that is not ours. The sender
	 * hardware address is what neighbour caches learn, so it decides. */
	__u32 spa = read_ip(arp->spa);
	if (spa != 0)
		note_conflict(spa, ifindex, arp, iface);

	if (arp->op != bpf_htons(ARPOP_REQUEST))
		return PASS;
	if (!mac_is_broadcast(eth->h_dest) && !mac_equal(eth->h_dest, iface->mac))
		return PASS; /* unicast to someone else */
	if (mac_is_multicast(eth->h_source) || mac_is_zero(eth->h_source) || mac_is_multicast(arp->sha))
		return PASS; /* nobody to answer to */

	__u32 tpa = read_ip(arp->tpa);
	if (spa == tpa)
		return PASS; /* someone else's announcement, not a question (counted above) */

	struct responder_key key = { .ip4 = tpa, .ifindex = ifindex };
	struct responder_stats *stats = bpf_map_lookup_elem(&responder_v4, &key);
	if (!stats)
		return PASS;
	if (!agent_alive())
		return PASS;

	/* Build the reply in place. For an RFC 5227 probe (SPA 0.0.0.0) this gives
	 * TPA 0.0.0.0 and THA = the prober, as the Linux kernel answers probes. */
	__u8 requester_mac[ETH_ALEN_];
	__u8 requester_sha[ETH_ALEN_];
	__builtin_memcpy(requester_mac, eth->h_source, ETH_ALEN_);
	__builtin_memcpy(requester_sha, arp->sha, ETH_ALEN_);

	__builtin_memcpy(eth->h_dest, requester_mac, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, iface->mac, ETH_ALEN_);
	arp->op = bpf_htons(ARPOP_REPLY);
	__builtin_memcpy(arp->tha, requester_sha, ETH_ALEN_);
	__builtin_memcpy(arp->tpa, arp->spa, 4);
	__builtin_memcpy(arp->sha, iface->mac, ETH_ALEN_);
	__builtin_memcpy(arp->spa, &tpa, 4);

	__sync_fetch_and_add(&stats->replies, 1);
	return bpf_redirect(ifindex, 0);
}

#include "ndp.h"

SEC("tc")
int herald_l2_ingress(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_ARP) && skb->protocol != bpf_htons(ETH_P_IPV6))
		return PASS;
	/* A tagged frame seen on the parent device belongs to a VLAN: the program
	 * attached to that VLAN's sub-interface answers it (Cilium #37959). */
	if (skb->vlan_present)
		return PASS;

	__u32 ifindex = skb->ifindex;
	struct iface_info *iface = bpf_map_lookup_elem(&interfaces, &ifindex);
	if (!iface)
		return PASS; /* not an interface we serve, or not Ethernet */
	if (skb->protocol == bpf_htons(ETH_P_ARP))
		return handle_arp(skb, ifindex, iface);
	return handle_ndp(skb, ifindex, iface);
}

char LICENSE[] SEC("license") = "GPL";
