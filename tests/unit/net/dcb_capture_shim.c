/*
 * Test harness for the DCB codec capture test (LD_PRELOAD into iproute2's `dcb`).
 *
 * `dcb ets/pfc/app/buffer set` first READS the current setting and only then sends its SET
 * request, so against a software device (no DCB support) the SET is never sent. This shim
 * records every netlink request `dcb` sends to $NODEOS_DCB_CAPTURE and answers it locally
 * with an all-zero IEEE reply (for GET) or a success status (for SET), so `dcb` goes on to
 * emit the exact SET bytes we compare our encoder against. The kernel is never asked.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RTM_GETDCB 78
#define RTM_SETDCB 79
#define DCB_CMD_SDCBX 23

static unsigned char reply[4096];
static size_t reply_len;
static int reply_fd = -1;

static int is_netlink(int fd) {
    int domain = 0;
    socklen_t len = sizeof(domain);
    return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_NETLINK;
}

static size_t put_attr(unsigned char *p, uint16_t type, const void *data, uint16_t len) {
    struct nlattr a = {.nla_len = (uint16_t)(NLA_HDRLEN + len), .nla_type = type};
    memcpy(p, &a, sizeof(a));
    memset(p + NLA_HDRLEN, 0, NLA_ALIGN(len));
    if (data) memcpy(p + NLA_HDRLEN, data, len);
    return NLA_HDRLEN + NLA_ALIGN(len);
}

static void build_reply(const struct nlmsghdr *req) {
    unsigned char *p = reply;
    struct nlmsghdr *h = (struct nlmsghdr *)p;
    unsigned char cmd = ((const unsigned char *)NLMSG_DATA(req))[0 + 1];
    size_t off = NLMSG_HDRLEN;
    unsigned char dcbm[4] = {0, cmd, 0, 0};
    memcpy(p + off, dcbm, 4);
    off += 4;
    if (req->nlmsg_type == RTM_GETDCB) {
        unsigned char *nest = p + off;
        size_t n = NLA_HDRLEN;
        n += put_attr(nest + n, 1, NULL, 59);   /* DCB_ATTR_IEEE_ETS: struct ieee_ets */
        n += put_attr(nest + n, 2, NULL, 136);  /* DCB_ATTR_IEEE_PFC: struct ieee_pfc */
        n += put_attr(nest + n, 3 | NLA_F_NESTED, NULL, 0); /* empty APP table */
        n += put_attr(nest + n, 10, NULL, 44);  /* DCB_ATTR_DCB_BUFFER */
        struct nlattr a = {.nla_len = (uint16_t)n, .nla_type = 13 | NLA_F_NESTED};
        memcpy(nest, &a, sizeof(a));
        off += n;
        unsigned char dcbx = 0x09;
        off += put_attr(p + off, 14, &dcbx, 1);
    } else {
        unsigned char ok = 0;
        off += put_attr(p + off, cmd == DCB_CMD_SDCBX ? 14 : 13, &ok, 1);
    }
    h->nlmsg_len = (uint32_t)off;
    h->nlmsg_type = req->nlmsg_type;
    h->nlmsg_flags = 0;
    h->nlmsg_seq = req->nlmsg_seq;
    h->nlmsg_pid = 0;
    /* then the ACK */
    struct nlmsghdr *ack = (struct nlmsghdr *)(p + off);
    struct nlmsgerr err = {.error = 0, .msg = *req};
    ack->nlmsg_len = NLMSG_LENGTH(sizeof(err));
    ack->nlmsg_type = NLMSG_ERROR;
    ack->nlmsg_flags = NLM_F_CAPPED;
    ack->nlmsg_seq = req->nlmsg_seq;
    ack->nlmsg_pid = 0;
    memcpy(NLMSG_DATA(ack), &err, sizeof(err));
    reply_len = off + ack->nlmsg_len;
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr,
               socklen_t alen) {
    static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "sendto");
    const struct nlmsghdr *req = buf;
    if (!is_netlink(fd) || len < NLMSG_HDRLEN ||
        (req->nlmsg_type != RTM_GETDCB && req->nlmsg_type != RTM_SETDCB))
        return real(fd, buf, len, flags, addr, alen);
    const char *path = getenv("NODEOS_DCB_CAPTURE");
    if (path) {
        FILE *f = fopen(path, "ab");
        if (f) {
            uint32_t n = (uint32_t)len;
            fwrite(&n, sizeof(n), 1, f);
            fwrite(buf, 1, len, f);
            fclose(f);
        }
    }
    build_reply(req);
    reply_fd = fd;
    return (ssize_t)len;
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
    static ssize_t (*real)(int, struct msghdr *, int);
    if (!real) real = dlsym(RTLD_NEXT, "recvmsg");
    if (fd != reply_fd || reply_len == 0) return real(fd, msg, flags);
    size_t n = reply_len < msg->msg_iov[0].iov_len ? reply_len : msg->msg_iov[0].iov_len;
    memcpy(msg->msg_iov[0].iov_base, reply, n);
    if (msg->msg_name && msg->msg_namelen >= sizeof(struct sockaddr_nl)) {
        struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
        memcpy(msg->msg_name, &sa, sizeof(sa));
        msg->msg_namelen = sizeof(sa);
    }
    msg->msg_flags = 0;
    reply_len = 0;
    return (ssize_t)n;
}
