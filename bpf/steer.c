//go:build ignore

/* Cgroup connect steering for mcpintercept.
 *
 * Target cgroup:
 *   cgroup/connect4, cgroup/connect6  record where a TCP connect was going (and who made it) in
 *                                     the socket's storage, then rewrite it to the listener.
 *   sockops (mcpi_sockops_cl)         at TCP_CONNECT_CB, when the source port is known, publish
 *                                     that record under the connection's 4-tuple.
 *   cgroup/getpeername4, 6            show the application its original peer again.
 * Appliance cgroup:
 *   sockops (mcpi_sockops_ap)         at PASSIVE_ESTABLISHED_CB, move the record onto the
 *                                     accepted socket's storage, where user space reads it by fd.
 *
 * Every program returns 1 (allow): steering never refuses a connect, it only redirects or leaves
 * it alone, so a failure here degrades to a direct connection (fail-open).
 */

#include "bpf_defs.h"

char __license[] SEC("license") = "Dual MIT/GPL";

#define CFG_V4 (1U << 0)      /* an IPv4 listener exists: redirect IPv4 and IPv4-mapped */
#define CFG_V6 (1U << 1)      /* an IPv6 listener exists: redirect IPv6 */
#define CFG_ALL_DST (1U << 2) /* no destination set: every destination (loopback only with CFG_LOOPBACK) */
#define CFG_LOOPBACK (1U << 3) /* loopback destinations are steered too (exec: development servers on localhost) */

/* Why a connect of a steered process was left alone (mcpi_skipped), for `exec` to say. */
#define SKIP_LOOPBACK 1 /* a loopback destination without CFG_LOOPBACK */
#define SKIP_PORT 2     /* a port outside the steered set */
#define SKIP_DST 3      /* a destination outside the steered set */

#define REC_CLIENT (1U << 0)   /* on the connecting socket, set by connect4/6 */
#define REC_ACCEPTED (1U << 1) /* on the appliance's accepted socket, set by sockops */

struct config {
	__u64 netns_cookie; /* the appliance's network namespace */
	__u32 self_tgid;
	__u32 bypass_mark; /* 0: no mark check */
	__u32 listen_ip4;  /* network order */
	__u32 listen_ip6[4];
	__u16 listen_port4; /* host order */
	__u16 listen_port6;
	__u32 flags;
};

/* One bit per destination port; user space sets them all when no port set is configured, which
 * keeps the check a single load instead of a loop over ranges. */
struct port_set {
	__u8 bits[8192];
};

struct lpm4_key {
	__u32 prefixlen;
	__u32 addr; /* network order */
};

struct lpm6_key {
	__u32 prefixlen;
	__u32 addr[4];
};

/* Addresses are kept as 16 bytes with IPv4 in its ::ffff:a.b.c.d form, so that an IPv4 socket
 * and an IPv6 socket talking IPv4 (mapped) produce the same 4-tuple key on both ends. */
struct orig_rec {
	__u32 addr[4];     /* original destination, network order */
	__u32 via_addr[4]; /* the listener it was sent to instead */
	__u16 port;        /* original destination port, host order */
	__u16 via_port;
	__u8 family; /* 4 or 6: family of the original destination */
	__u8 flags;  /* REC_* */
	__u16 _pad;
	__u32 pid; /* tgid of the connecting process */
	__u32 tid;
	__u32 uid;
	__u32 gid;
	__u64 cgroup_id;
	char comm[16];
};

/* The 4-tuple of a redirected connection as both of its ends see it. The netns cookie keeps two
 * namespaces that happen to use the same loopback 4-tuple apart. */
struct tuple_key {
	__u64 netns_cookie;
	__u32 client_addr[4];
	__u32 listener_addr[4];
	__u16 client_port; /* host order */
	__u16 listener_port;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} mcpi_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_set);
} mcpi_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm4_key);
	__type(value, __u8);
} mcpi_dst4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm6_key);
	__type(value, __u8);
} mcpi_dst6 SEC(".maps");

/* Lives and dies with each socket: no entry outlives its connection, whatever accept does. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct orig_rec);
} mcpi_sk_orig SEC(".maps");

/* Hand-off from the client's socket to the accepted one. Entries are deleted when the appliance's
 * side takes them (not when the client closes: a short connection may be closed before the
 * appliance accepts it); LRU eviction bounds what connections that never reach accept leave. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tuple_key);
	__type(value, struct orig_rec);
} mcpi_by_tuple SEC(".maps");

/* Connects of steered processes that were left alone, by destination and reason: a bounded count
 * that `exec` prints when nothing was intercepted. */
struct skip_key {
	__u32 addr[4]; /* network order; IPv4 as ::ffff:a.b.c.d */
	__u16 port;    /* host order */
	__u8 reason;   /* SKIP_* */
	__u8 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct skip_key);
	__type(value, __u64);
} mcpi_skipped SEC(".maps");

static __always_inline void note_skip(__u32 a0, __u32 a1, __u32 a2, __u32 a3, __u16 port, __u8 reason)
{
	struct skip_key k = {.addr = {a0, a1, a2, a3}, .port = port, .reason = reason, ._pad = 0};
	__u64 *n = bpf_map_lookup_elem(&mcpi_skipped, &k);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	__u64 one = 1;
	bpf_map_update_elem(&mcpi_skipped, &k, &one, BPF_NOEXIST);
}

static __always_inline struct config *get_config(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&mcpi_config, &zero);
}

static __always_inline int port_wanted(__u16 port)
{
	__u32 zero = 0;
	struct port_set *ps = bpf_map_lookup_elem(&mcpi_ports, &zero);
	if (!ps)
		return 0;
	return (ps->bits[(port >> 3) & 8191] >> (port & 7)) & 1;
}

/* Who must never be steered: other network namespaces (the listener does not exist there), the
 * appliance itself, and sockets carrying the bypass mark (the appliance's upstream dials). */
static __always_inline int skip_socket(struct bpf_sock_addr *ctx, struct config *cfg)
{
	if (ctx->type != SOCK_STREAM || ctx->protocol != IPPROTO_TCP)
		return 1;
	if (bpf_get_netns_cookie(ctx) != cfg->netns_cookie)
		return 1;
	if ((__u32)(bpf_get_current_pid_tgid() >> 32) == cfg->self_tgid)
		return 1;
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	if (cfg->bypass_mark && sk->mark == cfg->bypass_mark)
		return 1;
	return 0;
}

static __always_inline int v4_loopback(__u32 addr)
{
	return (bpf_ntohl(addr) >> 24) == 127;
}

static __always_inline int v4_wanted(struct config *cfg, __u32 addr)
{
	if (cfg->flags & CFG_ALL_DST)
		return 1;
	struct lpm4_key k = {.prefixlen = 32, .addr = addr};
	return bpf_map_lookup_elem(&mcpi_dst4, &k) != 0;
}

static __always_inline void fill_identity(struct orig_rec *r)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 uid_gid = bpf_get_current_uid_gid();
	r->pid = pid_tgid >> 32;
	r->tid = (__u32)pid_tgid;
	r->uid = (__u32)uid_gid;
	r->gid = uid_gid >> 32;
	r->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	r->flags = REC_CLIENT;
	r->_pad = 0;
}

SEC("cgroup/connect4")
int mcpi_connect4(struct bpf_sock_addr *ctx)
{
	struct config *cfg = get_config();
	if (!cfg || !(cfg->flags & CFG_V4))
		return 1;
	__u32 dst = ctx->user_ip4;
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	if (dst == 0 || port == 0)
		return 1;
	if (skip_socket(ctx, cfg))
		return 1;
	__u32 m2 = bpf_htonl(0xffff);
	if (v4_loopback(dst)) {
		if (dst == cfg->listen_ip4 && port == cfg->listen_port4)
			return 1; /* the appliance's own listener */
		if (!(cfg->flags & CFG_LOOPBACK)) {
			note_skip(0, 0, m2, dst, port, SKIP_LOOPBACK);
			return 1;
		}
	}
	if (!v4_wanted(cfg, dst)) {
		note_skip(0, 0, m2, dst, port, SKIP_DST);
		return 1;
	}
	if (!port_wanted(port)) {
		note_skip(0, 0, m2, dst, port, SKIP_PORT);
		return 1;
	}

	struct orig_rec *r = bpf_sk_storage_get(&mcpi_sk_orig, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!r)
		return 1; /* nowhere to keep the original: better a direct connect than a lost one */
	r->addr[0] = 0;
	r->addr[1] = 0;
	r->addr[2] = bpf_htonl(0xffff);
	r->addr[3] = dst;
	r->port = port;
	r->via_addr[0] = 0;
	r->via_addr[1] = 0;
	r->via_addr[2] = bpf_htonl(0xffff);
	r->via_addr[3] = cfg->listen_ip4;
	r->via_port = cfg->listen_port4;
	r->family = 4;
	fill_identity(r);

	ctx->user_ip4 = cfg->listen_ip4;
	ctx->user_port = (__u32)bpf_htons(cfg->listen_port4);
	return 1;
}

SEC("cgroup/connect6")
int mcpi_connect6(struct bpf_sock_addr *ctx)
{
	struct config *cfg = get_config();
	if (!cfg)
		return 1;
	__u32 a0 = ctx->user_ip6[0], a1 = ctx->user_ip6[1], a2 = ctx->user_ip6[2], a3 = ctx->user_ip6[3];
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	if (port == 0)
		return 1;
	int mapped = a0 == 0 && a1 == 0 && a2 == bpf_htonl(0xffff);
	int loop;
	if (mapped) {
		if (!(cfg->flags & CFG_V4) || a3 == 0)
			return 1;
		loop = v4_loopback(a3);
		if (loop && a3 == cfg->listen_ip4 && port == cfg->listen_port4)
			return 1; /* the appliance's own listener */
	} else {
		if (!(cfg->flags & CFG_V6))
			return 1;
		if (a0 == 0 && a1 == 0 && a2 == 0 && a3 == 0)
			return 1; /* :: */
		loop = a0 == 0 && a1 == 0 && a2 == 0 && a3 == bpf_htonl(1); /* ::1 */
		if (loop && port == cfg->listen_port6 && cfg->listen_ip6[0] == a0 && cfg->listen_ip6[1] == a1 &&
		    cfg->listen_ip6[2] == a2 && cfg->listen_ip6[3] == a3)
			return 1; /* the appliance's own listener */
	}
	if (skip_socket(ctx, cfg))
		return 1;
	if (loop && !(cfg->flags & CFG_LOOPBACK)) {
		note_skip(a0, a1, a2, a3, port, SKIP_LOOPBACK);
		return 1;
	}
	if (mapped) {
		if (!v4_wanted(cfg, a3)) {
			note_skip(a0, a1, a2, a3, port, SKIP_DST);
			return 1;
		}
	} else if (!(cfg->flags & CFG_ALL_DST)) {
		struct lpm6_key k = {.prefixlen = 128, .addr = {a0, a1, a2, a3}};
		if (!bpf_map_lookup_elem(&mcpi_dst6, &k)) {
			note_skip(a0, a1, a2, a3, port, SKIP_DST);
			return 1;
		}
	}
	if (!port_wanted(port)) {
		note_skip(a0, a1, a2, a3, port, SKIP_PORT);
		return 1;
	}

	struct orig_rec *r = bpf_sk_storage_get(&mcpi_sk_orig, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!r)
		return 1;
	r->addr[0] = a0;
	r->addr[1] = a1;
	r->addr[2] = a2;
	r->addr[3] = a3;
	r->port = port;
	fill_identity(r);

	if (mapped) {
		/* Stay IPv4-mapped (::ffff:127.0.0.1, not ::1) so a V6ONLY socket still gets the
		 * ENETUNREACH it would have got for the original address. */
		r->family = 4;
		r->via_addr[0] = 0;
		r->via_addr[1] = 0;
		r->via_addr[2] = bpf_htonl(0xffff);
		r->via_addr[3] = cfg->listen_ip4;
		r->via_port = cfg->listen_port4;
	} else {
		r->family = 6;
		r->via_addr[0] = cfg->listen_ip6[0];
		r->via_addr[1] = cfg->listen_ip6[1];
		r->via_addr[2] = cfg->listen_ip6[2];
		r->via_addr[3] = cfg->listen_ip6[3];
		r->via_port = cfg->listen_port6;
	}
	ctx->user_ip6[0] = r->via_addr[0];
	ctx->user_ip6[1] = r->via_addr[1];
	ctx->user_ip6[2] = r->via_addr[2];
	ctx->user_ip6[3] = r->via_addr[3];
	ctx->user_port = (__u32)bpf_htons(r->via_port);
	return 1;
}

/* The 4-tuple of a sockops socket, normalised to the 16-byte form. local_is_client tells which
 * end is the client: the connecting socket's local end, or the accepted socket's remote end. */
static __always_inline void tuple_of(struct bpf_sock_ops *skops, struct tuple_key *k, int local_is_client)
{
	/* Every field is read unconditionally, each with one volatile load, and the family only
	 * selects among the values: with loads inside family branches clang merges them into one
	 * load through a computed context pointer, which the verifier rejects ("modified ctx ptr"). */
	int v4 = CTX_READ(skops->family) == AF_INET;
	__u32 l4 = CTX_READ(skops->local_ip4), r4 = CTX_READ(skops->remote_ip4);
	__u32 l[4], r[4];
	l[0] = CTX_READ(skops->local_ip6[0]);
	l[1] = CTX_READ(skops->local_ip6[1]);
	l[2] = CTX_READ(skops->local_ip6[2]);
	l[3] = CTX_READ(skops->local_ip6[3]);
	r[0] = CTX_READ(skops->remote_ip6[0]);
	r[1] = CTX_READ(skops->remote_ip6[1]);
	r[2] = CTX_READ(skops->remote_ip6[2]);
	r[3] = CTX_READ(skops->remote_ip6[3]);
	if (v4) {
		l[0] = 0;
		l[1] = 0;
		l[2] = bpf_htonl(0xffff);
		l[3] = l4;
		r[0] = 0;
		r[1] = 0;
		r[2] = bpf_htonl(0xffff);
		r[3] = r4;
	}
	__u16 lport = (__u16)CTX_READ(skops->local_port);
	__u16 rport = (__u16)bpf_ntohl(CTX_READ(skops->remote_port));

	__builtin_memset(k, 0, sizeof(*k));
	k->netns_cookie = bpf_get_netns_cookie(skops);
	if (local_is_client) {
		__builtin_memcpy(k->client_addr, l, sizeof(l));
		__builtin_memcpy(k->listener_addr, r, sizeof(r));
		k->client_port = lport;
		k->listener_port = rport;
	} else {
		__builtin_memcpy(k->client_addr, r, sizeof(r));
		__builtin_memcpy(k->listener_addr, l, sizeof(l));
		k->client_port = rport;
		k->listener_port = lport;
	}
}

/* Target cgroup. TCP_CONNECT_CB runs inside connect() after the source port is chosen and before
 * the SYN is sent, so the entry exists before the appliance can possibly see the connection;
 * connect4/6 cannot key by 4-tuple themselves (no source port yet). */
SEC("sockops")
int mcpi_sockops_cl(struct bpf_sock_ops *skops)
{
	if (skops->op != BPF_SOCK_OPS_TCP_CONNECT_CB)
		return 1;
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return 1;
	struct orig_rec *r = bpf_sk_storage_get(&mcpi_sk_orig, sk, 0, 0);
	if (!r || !(r->flags & REC_CLIENT))
		return 1;
	struct tuple_key k;
	tuple_of(skops, &k, 1);
	/* A record left from an earlier connect of this socket (disconnected with AF_UNSPEC and
	 * connected elsewhere) must not be published for a connection that was not redirected. */
	if (k.listener_port != r->via_port || k.listener_addr[0] != r->via_addr[0] ||
	    k.listener_addr[1] != r->via_addr[1] || k.listener_addr[2] != r->via_addr[2] ||
	    k.listener_addr[3] != r->via_addr[3])
		return 1;
	bpf_map_update_elem(&mcpi_by_tuple, &k, r, BPF_ANY);
	return 1;
}

/* Appliance cgroup (the cgroup of the process that created the listeners: accepted sockets
 * inherit the listener's cgroup). PASSIVE_ESTABLISHED_CB runs before accept() can return the
 * socket, so the record is in place when the engine asks for it. */
SEC("sockops")
int mcpi_sockops_ap(struct bpf_sock_ops *skops)
{
	if (skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	struct tuple_key k;
	tuple_of(skops, &k, 0);
	struct orig_rec *r = bpf_map_lookup_elem(&mcpi_by_tuple, &k);
	if (!r)
		return 1;
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return 1;
	struct orig_rec *dst = bpf_sk_storage_get(&mcpi_sk_orig, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!dst)
		return 1; /* leave the entry: user space falls back to reading it by 4-tuple */
	__builtin_memcpy(dst, r, sizeof(*dst));
	dst->flags = REC_ACCEPTED;
	bpf_map_delete_elem(&mcpi_by_tuple, &k);
	return 1;
}

SEC("cgroup/getpeername4")
int mcpi_getpeer4(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	struct orig_rec *r = bpf_sk_storage_get(&mcpi_sk_orig, sk, 0, 0);
	if (!r || !(r->flags & REC_CLIENT) || r->family != 4)
		return 1;
	if (ctx->user_ip4 != r->via_addr[3] || bpf_ntohs((__u16)ctx->user_port) != r->via_port)
		return 1;
	ctx->user_ip4 = r->addr[3];
	ctx->user_port = (__u32)bpf_htons(r->port);
	return 1;
}

SEC("cgroup/getpeername6")
int mcpi_getpeer6(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	struct orig_rec *r = bpf_sk_storage_get(&mcpi_sk_orig, sk, 0, 0);
	if (!r || !(r->flags & REC_CLIENT))
		return 1;
	if (ctx->user_ip6[0] != r->via_addr[0] || ctx->user_ip6[1] != r->via_addr[1] ||
	    ctx->user_ip6[2] != r->via_addr[2] || ctx->user_ip6[3] != r->via_addr[3] ||
	    bpf_ntohs((__u16)ctx->user_port) != r->via_port)
		return 1;
	ctx->user_ip6[0] = r->addr[0];
	ctx->user_ip6[1] = r->addr[1];
	ctx->user_ip6[2] = r->addr[2];
	ctx->user_ip6[3] = r->addr[3];
	ctx->user_port = (__u32)bpf_htons(r->port);
	return 1;
}
