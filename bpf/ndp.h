/* SPDX-License-Identifier: GPL-2.0 */
/*
 * IPv6 Neighbor Discovery (RFC 4861) for the L2 responder: included by
 * l2_responder.bpf.c after the ARP half, sharing its maps and helpers.
 *
 * A Neighbor Solicitation (135) for an IPv6 address in responder_v6 on the
 * receiving interface is answered in place with a Neighbor Advertisement (136):
 * Router clear, Override set, Solicited set (clear for a DAD probe), the Target
 * Link-Layer Address option with the interface's MAC, hop limit 255, ICMPv6
 * checksum over the pseudo-header.
 *
 * Validation follows RFC 4861 7.1.1 and is done before anything is answered or
 * counted: hop limit 255, ICMPv6 code 0, a correct checksum, ICMPv6 length >= 24,
 * a non-multicast target, every option of non-zero length and inside the
 * message, and no source link-layer option when the source is unspecified.
 * Stricter than the RFC asks, and never answered: a solicitation not sent to
 * the target's solicited-node group or to the target itself, a source-link-layer
 * option of another length than Ethernet's, a multicast source, an NS behind
 * extension headers (real stacks never send one), and an ICMPv6 message over
 * ND_MSG_MAX bytes. Whatever is not answered passes on to the kernel untouched.
 *
 * DAD (source ::): answered, to all-nodes (ff02::1, Solicited clear), as RFC
 * 4861 7.2.4 says the owner of an address answers: the prober sees the address
 * is in use and does not configure it, so it never takes the service address
 * from its owner. Staying silent would let it configure the address and then
 * answer for it itself. The same reply also refreshes every cache on the link.
 *
 * Conflicts: a valid NA whose target we answer for, or a valid NS whose source
 * we answer for, carrying a link-layer address that is not one of ours, is a
 * claim: counted and reported like a foreign ARP claim.
 */

#define ETH_P_IPV6_ 0x86DD
#define IPPROTO_ICMPV6_ 58
#define ND_NEIGHBOR_SOLICIT 135
#define ND_NEIGHBOR_ADVERT 136
#define ND_OPT_SOURCE_LL 1
#define ND_OPT_TARGET_LL 2
#define ND_HDR_LEN 24 /* type, code, checksum, flags/reserved, target */
#define IPV6_HLEN 40
#define ND_FRAME_MIN (ETH_HLEN + IPV6_HLEN + ND_HDR_LEN)
/* The NA this program sends: Ethernet + IPv6 + NA + one TLLA option. */
#define NA_MSG_LEN (ND_HDR_LEN + 8)
#define NA_FRAME_LEN (ETH_HLEN + IPV6_HLEN + NA_MSG_LEN)
/* Longest ICMPv6 message checked (a power of two; real NS carry at most two options). */
#define ND_MSG_MAX 256
#define ND_MAX_OPTS ((ND_MSG_MAX - ND_HDR_LEN) / 8)
#define NA_FLAG_SOLICITED 0x40000000
#define NA_FLAG_OVERRIDE 0x20000000

struct ipv6_hdr_ {
	__u8 vtc;         /* version (4 bits), traffic class (high 4 bits) */
	__u8 tc_flow[3];
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/*
 * The ICMPv6 message behind its pseudo-header, contiguous, so one
 * bpf_csum_diff covers both: RFC 4443 2.3 / RFC 8200 8.1.
 */
struct nd_scratch {
	__u8 saddr[16];
	__u8 daddr[16];
	__be32 len;
	__be32 nexthdr; /* 3 zero bytes, then 58 */
	__u8 msg[ND_MSG_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct nd_scratch);
	__uint(max_entries, 1);
} nd_scratch_map SEC(".maps");

/* What parsing a valid NS/NA yields. */
struct nd_parsed {
	__u8 type;
	__u8 has_lladdr; /* SLLA (NS) or TLLA (NA) option present */
	__u8 lladdr[ETH_ALEN_];
	__u8 target[16];
};

static __always_inline __u16 csum_fold_(__s64 sum)
{
	__u32 c = (__u32)sum;
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return (__u16)~c;
}

static __always_inline int ip6_is_unspecified(const __u8 *a)
{
	__u64 hi, lo;
	__builtin_memcpy(&hi, a, 8);
	__builtin_memcpy(&lo, a + 8, 8);
	return (hi | lo) == 0;
}

static __always_inline int ip6_equal(const __u8 *a, const __u8 *b)
{
	__u64 a0, a1, b0, b1;
	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	__builtin_memcpy(&b0, b, 8);
	__builtin_memcpy(&b1, b + 8, 8);
	return a0 == b0 && a1 == b1;
}

/* ff02::1:ffXX:XXXX for the target's low 24 bits (RFC 4291 2.7.1). */
static __always_inline int ip6_is_solicited_node_of(const __u8 *dst, const __u8 *target)
{
	static const __u8 prefix[13] = { 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff };
	for (int i = 0; i < 13; i++)
		if (dst[i] != prefix[i])
			return 0;
	return dst[13] == target[13] && dst[14] == target[14] && dst[15] == target[15];
}

/*
 * Validates the NS/NA at ETH_HLEN of skb (RFC 4861 7.1.1 / 7.1.2) and fills
 * `out`. Returns 0 when valid, -1 when it must be ignored. `ip6` is the
 * already bounds-checked IPv6 header in the packet.
 */
static __always_inline int nd_validate(struct __sk_buff *skb, const struct ipv6_hdr_ *ip6, struct nd_parsed *out)
{
	__u32 len = bpf_ntohs(ip6->payload_len);
	if (len < ND_HDR_LEN || len > ND_MSG_MAX)
		return -1; /* too short, or longer than we check */
	if (ETH_HLEN + IPV6_HLEN + len > skb->len)
		return -1; /* truncated */
	__u32 zero = 0;
	struct nd_scratch *s = bpf_map_lookup_elem(&nd_scratch_map, &zero);
	if (!s)
		return -1;
	__builtin_memcpy(s->saddr, ip6->saddr, 16);
	__builtin_memcpy(s->daddr, ip6->daddr, 16);
	s->len = bpf_htonl(len);
	s->nexthdr = bpf_htonl(IPPROTO_ICMPV6_);
	if (bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_HLEN, s->msg, len) < 0)
		return -1;
	/* The ICMPv6 length need not be a multiple of 4 (then the options are
	 * malformed anyway, see below); bpf_csum_diff needs one: pad with zeros,
	 * which the checksum ignores. */
	__u32 padded = (len + 3) & ~3U;
	if (padded > ND_MSG_MAX)
		return -1;
	if (padded != len) {
		if (len > ND_MSG_MAX - 3)
			return -1;
		s->msg[len] = 0;
		s->msg[len + 1] = 0;
		s->msg[len + 2] = 0;
	}
	__u32 csum_len = 40 + padded;
	if (csum_len > sizeof(*s))
		return -1;
	if (csum_fold_(bpf_csum_diff(0, 0, (__be32 *)s, csum_len, 0)) != 0)
		return -1; /* wrong checksum */

	out->type = s->msg[0];
	if (s->msg[1] != 0)
		return -1; /* ICMPv6 code must be 0 */
	__builtin_memcpy(out->target, s->msg + 8, 16);
	if (out->target[0] == 0xff)
		return -1; /* multicast target */

	/* Options: type, length in units of 8 bytes (0 is invalid), body. */
	__u8 want = out->type == ND_NEIGHBOR_SOLICIT ? ND_OPT_SOURCE_LL : ND_OPT_TARGET_LL;
	__u32 off = ND_HDR_LEN;
	out->has_lladdr = 0;
	for (int i = 0; i < ND_MAX_OPTS; i++) {
		if (off >= len)
			break;
		if (off + 2 > len)
			return -1; /* truncated option header */
		__u32 o = off;
		/* Keep the compiler from folding this bound into the one above:
		 * the verifier needs it on the register used for the access. */
		asm volatile("" : "+r"(o));
		if (o > ND_MSG_MAX - 8)
			return -1;
		const __u8 *opt = s->msg + o;
		__u8 type = opt[0];
		__u8 units = opt[1];
		if (units == 0)
			return -1; /* length 0: RFC 4861 4.6 says discard the packet */
		__u32 bytes = (__u32)units * 8;
		if (off + bytes > len)
			return -1; /* truncated option */
		if (type == want) {
			if (units != 1)
				return -1; /* not an Ethernet address */
			__builtin_memcpy(out->lladdr, opt + 2, ETH_ALEN_);
			out->has_lladdr = 1;
		}
		off += bytes;
	}
	if (off < len)
		return -1; /* more options than we walk (cannot happen within ND_MSG_MAX) */
	if (out->type == ND_NEIGHBOR_SOLICIT && out->has_lladdr && ip6_is_unspecified(ip6->saddr))
		return -1; /* RFC 4861 7.1.1: no SLLA from the unspecified address */
	return 0;
}

/* A claim of an IPv6 address we answer for: count it, and report it while we are live. */
static __always_inline void note_conflict_v6(const __u8 *ip, __u32 ifindex, const __u8 *mac, __u8 type)
{
	struct responder_key6 key = { .ifindex = ifindex };
	__builtin_memcpy(key.ip6, ip, 16);
	struct responder_stats *stats = bpf_map_lookup_elem(&responder_v6, &key);
	if (!stats)
		return;
	__sync_fetch_and_add(&stats->conflicts, 1);
	if (!agent_alive())
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 *last = bpf_map_lookup_elem(&conflict_reported_v6, &key);
	if (last && now - *last < CONFLICT_REPORT_GAP_NS)
		return;
	bpf_map_update_elem(&conflict_reported_v6, &key, &now, BPF_ANY);
	struct conflict_event *ev = bpf_ringbuf_reserve(&conflict_events, sizeof(*ev), 0);
	if (!ev)
		return;
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->family = 6;
	ev->op = bpf_htons(type);
	ev->ifindex = ifindex;
	__builtin_memcpy(ev->ip, ip, 16);
	__builtin_memcpy(ev->sha, mac, ETH_ALEN_);
	ev->ktime_ns = now;
	bpf_ringbuf_submit(ev, 0);
}

static __always_inline int in_responder_v6(const __u8 *ip, __u32 ifindex)
{
	struct responder_key6 key = { .ifindex = ifindex };
	__builtin_memcpy(key.ip6, ip, 16);
	return bpf_map_lookup_elem(&responder_v6, &key) != 0;
}

static __always_inline int handle_ndp(struct __sk_buff *skb, __u32 ifindex, struct iface_info *iface)
{
	if (skb->len < ND_FRAME_MIN)
		return PASS;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	if (data + ND_FRAME_MIN > data_end) {
		if (bpf_skb_pull_data(skb, ND_FRAME_MIN) < 0)
			return PASS;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (data + ND_FRAME_MIN > data_end)
			return PASS;
	}
	struct ethhdr *eth = data;
	struct ipv6_hdr_ *ip6 = data + ETH_HLEN;
	__u8 *icmp = data + ETH_HLEN + IPV6_HLEN;
	/* The fast path for all other IPv6 traffic: three byte compares. */
	if (ip6->nexthdr != IPPROTO_ICMPV6_ || (icmp[0] != ND_NEIGHBOR_SOLICIT && icmp[0] != ND_NEIGHBOR_ADVERT))
		return PASS;
	if ((ip6->vtc >> 4) != 6 || ip6->hop_limit != 255)
		return PASS; /* RFC 4861: not from an on-link neighbour; never answered */
	if (mac_is_multicast(eth->h_source) || mac_is_zero(eth->h_source) || ip6->saddr[0] == 0xff)
		return PASS;

	/* Look before validating: only frames about our addresses cost a checksum. */
	__u8 *target = icmp + 8;
	int about_target = in_responder_v6(target, ifindex);
	int from_ours = icmp[0] == ND_NEIGHBOR_SOLICIT && in_responder_v6(ip6->saddr, ifindex);
	if (!about_target && !from_ours)
		return PASS;

	struct nd_parsed nd;
	if (nd_validate(skb, ip6, &nd) < 0)
		return PASS;
	/* nd_validate may have moved packet data (it does not, but re-derive anyway). */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (data + ND_FRAME_MIN > data_end)
		return PASS;
	eth = data;
	ip6 = data + ETH_HLEN;

	/* Conflicts: the link-layer address a neighbour cache would learn. */
	__u8 claimed_mac[ETH_ALEN_];
	if (nd.has_lladdr)
		__builtin_memcpy(claimed_mac, nd.lladdr, ETH_ALEN_);
	else
		__builtin_memcpy(claimed_mac, eth->h_source, ETH_ALEN_);
	if (nd.type == ND_NEIGHBOR_ADVERT) {
		if (!mac_is_ours(claimed_mac, iface))
			note_conflict_v6(nd.target, ifindex, claimed_mac, ND_NEIGHBOR_ADVERT);
		return PASS; /* another host's advertisement is not a question */
	}
	if (from_ours && !mac_is_ours(claimed_mac, iface))
		note_conflict_v6(ip6->saddr, ifindex, claimed_mac, ND_NEIGHBOR_SOLICIT);
	if (!about_target)
		return PASS;

	int dad = ip6_is_unspecified(ip6->saddr);
	if (!ip6_is_solicited_node_of(ip6->daddr, nd.target) && !ip6_equal(ip6->daddr, nd.target))
		return PASS; /* not addressed to the target (RFC 4861 7.2.3) */
	if (dad && !ip6_is_solicited_node_of(ip6->daddr, nd.target))
		return PASS; /* RFC 4861 7.1.1: DAD goes to the solicited-node group */
	if (!mac_is_multicast(eth->h_dest) && !mac_equal(eth->h_dest, iface->mac))
		return PASS; /* unicast to someone else */
	if (nd.has_lladdr && (mac_is_multicast(nd.lladdr) || mac_is_zero(nd.lladdr)))
		return PASS; /* nobody to answer to */

	struct responder_key6 key = { .ifindex = ifindex };
	__builtin_memcpy(key.ip6, nd.target, 16);
	struct responder_stats *stats = bpf_map_lookup_elem(&responder_v6, &key);
	if (!stats)
		return PASS;
	if (!agent_alive())
		return PASS;

	/* Where the NA goes: the solicitor (its SLLA, else the frame's source), or
	 * all-nodes for a DAD probe. */
	__u8 dst_mac[ETH_ALEN_] = { 0x33, 0x33, 0, 0, 0, 1 };
	__u8 dst_ip[16] = { 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 };
	if (!dad) {
		__builtin_memcpy(dst_mac, claimed_mac, ETH_ALEN_);
		__builtin_memcpy(dst_ip, ip6->saddr, 16);
	}

	/* The NA, behind its pseudo-header, in the scratch buffer: checksum it there. */
	__u32 zero = 0;
	struct nd_scratch *s = bpf_map_lookup_elem(&nd_scratch_map, &zero);
	if (!s)
		return PASS;
	__builtin_memcpy(s->saddr, nd.target, 16);
	__builtin_memcpy(s->daddr, dst_ip, 16);
	s->len = bpf_htonl(NA_MSG_LEN);
	s->nexthdr = bpf_htonl(IPPROTO_ICMPV6_);
	__builtin_memset(s->msg, 0, NA_MSG_LEN);
	s->msg[0] = ND_NEIGHBOR_ADVERT;
	__be32 flags = bpf_htonl(NA_FLAG_OVERRIDE | (dad ? 0 : NA_FLAG_SOLICITED));
	__builtin_memcpy(s->msg + 4, &flags, 4);
	__builtin_memcpy(s->msg + 8, nd.target, 16);
	s->msg[24] = ND_OPT_TARGET_LL;
	s->msg[25] = 1;
	__builtin_memcpy(s->msg + 26, iface->mac, ETH_ALEN_);
	__u16 csum = csum_fold_(bpf_csum_diff(0, 0, (__be32 *)s, 40 + NA_MSG_LEN, 0));
	__builtin_memcpy(s->msg + 2, &csum, 2);

	/* Resize the frame to exactly the NA, then write it. */
	if (skb->len != NA_FRAME_LEN && bpf_skb_change_tail(skb, NA_FRAME_LEN, 0) < 0)
		return PASS;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (data + NA_FRAME_LEN > data_end) {
		if (bpf_skb_pull_data(skb, NA_FRAME_LEN) < 0)
			return TC_ACT_SHOT; /* already resized: it is no longer the NS */
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (data + NA_FRAME_LEN > data_end)
			return TC_ACT_SHOT;
	}
	eth = data;
	ip6 = data + ETH_HLEN;
	__builtin_memcpy(eth->h_dest, dst_mac, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, iface->mac, ETH_ALEN_);
	eth->h_proto = bpf_htons(ETH_P_IPV6_);
	ip6->vtc = 0x60;
	ip6->tc_flow[0] = 0;
	ip6->tc_flow[1] = 0;
	ip6->tc_flow[2] = 0;
	ip6->payload_len = bpf_htons(NA_MSG_LEN);
	ip6->nexthdr = IPPROTO_ICMPV6_;
	ip6->hop_limit = 255;
	__builtin_memcpy(ip6->saddr, s->saddr, 16);
	__builtin_memcpy(ip6->daddr, s->daddr, 16);
	__builtin_memcpy(data + ETH_HLEN + IPV6_HLEN, s->msg, NA_MSG_LEN);

	__sync_fetch_and_add(&stats->replies, 1);
	return bpf_redirect(ifindex, 0);
}
