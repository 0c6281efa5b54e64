/* Minimal, self-contained definitions for steer.c.
 *
 * Only what the steering programs use, copied from the kernel UAPI (include/uapi/linux/bpf.h,
 * which only ever appends), so that generating needs neither kernel headers, libbpf-dev nor a
 * 3 MB vmlinux.h, and the object does not change with the build host's header versions. The
 * programs read nothing but UAPI context fields, so no CO-RE relocation is needed.
 */
#ifndef MCPI_BPF_DEFS_H
#define MCPI_BPF_DEFS_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef __u16 __be16;
typedef __u32 __be32;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

/* One load of a context field, exactly where it is written: the verifier only accepts context
 * accesses at a constant offset from the context pointer itself. */
#define CTX_READ(field) (*(volatile typeof(field) *)&(field))

/* BTF-defined maps, as libbpf's bpf_helpers.h spells them. */
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bpf_htons(x) ((__u16)__builtin_bswap16(x))
#define bpf_ntohs(x) ((__u16)__builtin_bswap16(x))
#define bpf_htonl(x) ((__u32)__builtin_bswap32(x))
#define bpf_ntohl(x) ((__u32)__builtin_bswap32(x))
#else
#define bpf_htons(x) ((__u16)(x))
#define bpf_ntohs(x) ((__u16)(x))
#define bpf_htonl(x) ((__u32)(x))
#define bpf_ntohl(x) ((__u32)(x))
#endif

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define IPPROTO_TCP 6

enum {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_LPM_TRIE = 11,
	BPF_MAP_TYPE_SK_STORAGE = 24,
};

#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_SK_STORAGE_GET_F_CREATE (1ULL << 0)

enum {
	BPF_SOCK_OPS_TCP_CONNECT_CB = 3,
	BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB = 5,
};

#define __bpf_md_ptr(type, name) \
	union {                  \
		type name;       \
		__u64 : 64;      \
	} __attribute__((aligned(8)))

struct bpf_sock {
	__u32 bound_dev_if;
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 mark;
	__u32 priority;
	__u32 src_ip4;
	__u32 src_ip6[4];
	__u32 src_port;
	__be16 dst_port;
	__u16 : 16;
	__u32 dst_ip4;
	__u32 dst_ip6[4];
	__u32 state;
	__s32 rx_queue_mapping;
};

/* Context of cgroup/connect{4,6} and cgroup/getpeername{4,6}; fields after sk are not used. */
struct bpf_sock_addr {
	__u32 user_family;
	__u32 user_ip4;    /* network order */
	__u32 user_ip6[4]; /* network order */
	__u32 user_port;   /* network order in the low 16 bits; only 4-byte writes are allowed */
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 msg_src_ip4;
	__u32 msg_src_ip6[4];
	__bpf_md_ptr(struct bpf_sock *, sk);
};

/* Context of sockops; fields after sk are not used. */
struct bpf_sock_ops {
	__u32 op;
	union {
		__u32 args[4];
		__u32 reply;
		__u32 replylong[4];
	};
	__u32 family;
	__u32 remote_ip4;    /* network order */
	__u32 local_ip4;     /* network order */
	__u32 remote_ip6[4]; /* network order */
	__u32 local_ip6[4];  /* network order */
	__u32 remote_port;   /* network order as a 32-bit value: bpf_ntohl gives the port */
	__u32 local_port;    /* host order */
	__u32 is_fullsock;
	__u32 snd_cwnd;
	__u32 srtt_us;
	__u32 bpf_sock_ops_cb_flags;
	__u32 state;
	__u32 rtt_min;
	__u32 snd_ssthresh;
	__u32 rcv_nxt;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 mss_cache;
	__u32 ecn_flags;
	__u32 rate_delivered;
	__u32 rate_interval_us;
	__u32 packets_out;
	__u32 retrans_out;
	__u32 total_retrans;
	__u32 segs_in;
	__u32 data_segs_in;
	__u32 segs_out;
	__u32 data_segs_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 sk_txhash;
	__u64 bytes_received;
	__u64 bytes_acked;
	__bpf_md_ptr(struct bpf_sock *, sk);
};

/* Helpers, by their stable UAPI numbers. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static __u64 (*bpf_get_current_uid_gid)(void) = (void *)15;
static long (*bpf_get_current_comm)(void *buf, __u32 size_of_buf) = (void *)16;
static __u64 (*bpf_get_current_cgroup_id)(void) = (void *)80;
static void *(*bpf_sk_storage_get)(void *map, void *sk, void *value, __u64 flags) = (void *)107;
static __u64 (*bpf_get_netns_cookie)(void *ctx) = (void *)122;

#endif /* MCPI_BPF_DEFS_H */
