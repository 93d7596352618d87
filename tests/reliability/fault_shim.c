// A fault-injection shim for the reliability suite, loaded with LD_PRELOAD
// into the real smarm-server (or a test binary). It wraps the libc calls the
// server makes at its syscall seams (the kv log's file calls, the sockets'
// accept/send/recv) and fails chosen ones as the kernel would.
//
// Why a preloaded shim and not a test hook in tcp_stream / kv_log: it runs
// the binary users deploy, unmodified, with no test-only branch in the
// production code, and it reaches every call site the same way (the log's
// open, the listener's accept4, the connection's send).
//
// Rules, from SMARM_FAULTS (at load) and from the file named by
// SMARM_FAULT_CONTROL (polled every 10 ms; its whole content replaces the
// rules whenever it changes, an empty file means none), separated by ';' or
// newlines:
//
//     op:target:effect:probability[:limit]
//
//   op          open (also openat), write (also pwrite, writev), fdatasync,
//               fsync, ftruncate, rename, accept (also accept4), send (also
//               sendto, sendmsg), recv (also recvfrom)
//   target      a substring of the file's path (for open/rename the path
//               argument; for the other file calls the path the fd was
//               opened with), `sock` for sockets, `*` for any fd
//   effect      an errno name (ENOSPC, EIO, EMFILE, ENFILE, ECONNRESET,
//               EINTR, EPIPE), `short`: write only half of what was asked
//               (at least one byte) and return the count, or `slowMS`
//               (`slow1500`): sleep MS milliseconds, then make the real
//               call (a slow disk or a stalled peer)
//   probability 0..1 per matching call
//   limit       at most this many injections by this rule (default: no limit)
//
// Each injection appends "op target effect" to the file named by
// SMARM_FAULT_LOG, so a test can check that its faults really happened.
// SMARM_FAULT_SEED seeds the choices (per thread, mixed with the thread's
// order of first use).
//
// The calls it fails do nothing: an injected ENOSPC writes no byte, an
// injected EIO from fdatasync syncs nothing. That is what the server must
// survive; whether the kernel would in fact have written part of the data
// is covered by `short`.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum op { OP_OPEN, OP_WRITE, OP_FDATASYNC, OP_FSYNC, OP_FTRUNCATE, OP_RENAME, OP_ACCEPT,
          OP_SEND, OP_RECV, OP_COUNT };
static const char* const op_names[OP_COUNT] = {"open",      "write",  "fdatasync",
                                               "fsync",     "ftruncate", "rename",
                                               "accept",    "send",   "recv"};

#define EFFECT_SHORT (-1)
#define EFFECT_SLOW (-2)  // with rule.delay_ms; pick() sleeps and lets the call through
#define MAX_RULES 32
#define MAX_FDS 65536

struct rule {
    enum op op;
    char target[128];
    int effect;  // an errno, EFFECT_SHORT or EFFECT_SLOW
    long delay_ms;  // EFFECT_SLOW
    double probability;
    long limit;  // < 0: none
    atomic_long used;
};

struct rules {
    int n;
    struct rule r[MAX_RULES];
};

static _Atomic(struct rules*) current_rules;  // replaced whole; old sets leak (tests only)
static _Atomic(char*) fd_paths[MAX_FDS];      // the path each file fd was opened with (never freed:
                                              // another thread may be reading it)
static atomic_char fd_socket[MAX_FDS];        // 1 when the fd came from accept/socket
static atomic_uint thread_counter;
static unsigned long seed_base;
static int log_fd = -1;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

// The real calls.
static int (*real_open)(const char*, int, ...);
static int (*real_openat)(int, const char*, int, ...);
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec*, int);
static int (*real_fdatasync)(int);
static int (*real_fsync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_rename)(const char*, const char*);
static int (*real_accept)(int, struct sockaddr*, socklen_t*);
static int (*real_accept4)(int, struct sockaddr*, socklen_t*, int);
static ssize_t (*real_send)(int, const void*, size_t, int);
static ssize_t (*real_sendto)(int, const void*, size_t, int, const struct sockaddr*, socklen_t);
static ssize_t (*real_sendmsg)(int, const struct msghdr*, int);
static ssize_t (*real_recv)(int, void*, size_t, int);
static ssize_t (*real_recvfrom)(int, void*, size_t, int, struct sockaddr*, socklen_t*);
static int (*real_close)(int);

static atomic_int resolved;

// Called before the first real call: other libraries' constructors may run
// before ours.
static void resolve(void) {
    if (atomic_load_explicit(&resolved, memory_order_acquire)) return;
    real_open = dlsym(RTLD_NEXT, "open");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_accept = dlsym(RTLD_NEXT, "accept");
    real_accept4 = dlsym(RTLD_NEXT, "accept4");
    real_send = dlsym(RTLD_NEXT, "send");
    real_sendto = dlsym(RTLD_NEXT, "sendto");
    real_sendmsg = dlsym(RTLD_NEXT, "sendmsg");
    real_recv = dlsym(RTLD_NEXT, "recv");
    real_recvfrom = dlsym(RTLD_NEXT, "recvfrom");
    real_close = dlsym(RTLD_NEXT, "close");
    atomic_store_explicit(&resolved, 1, memory_order_release);
}

static int errno_named(const char* s, long* delay_ms) {
    static const struct {
        const char* name;
        int value;
    } names[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO},       {"EMFILE", EMFILE},
                 {"ENFILE", ENFILE}, {"ECONNRESET", ECONNRESET}, {"EINTR", EINTR},
                 {"EPIPE", EPIPE},   {"EDQUOT", EDQUOT}, {"ENOMEM", ENOMEM},
                 {"EAGAIN", EAGAIN}};
    if (strcmp(s, "short") == 0) return EFFECT_SHORT;
    if (strncmp(s, "slow", 4) == 0) {
        char* end = NULL;
        long ms = strtol(s + 4, &end, 10);
        if (end == s + 4 || *end != '\0' || ms <= 0) return 0;
        *delay_ms = ms;
        return EFFECT_SLOW;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcmp(s, names[i].name) == 0) return names[i].value;
    return 0;
}

static const char* effect_name(int e) {
    if (e == EFFECT_SHORT) return "short";
    if (e == EFFECT_SLOW) return "slow";
    switch (e) {
        case ENOSPC: return "ENOSPC";
        case EIO: return "EIO";
        case EMFILE: return "EMFILE";
        case ENFILE: return "ENFILE";
        case ECONNRESET: return "ECONNRESET";
        case EINTR: return "EINTR";
        case EPIPE: return "EPIPE";
        case EDQUOT: return "EDQUOT";
        case ENOMEM: return "ENOMEM";
        case EAGAIN: return "EAGAIN";
        default: return "?";
    }
}

// Parses the rules; a malformed rule is reported on stderr and skipped.
static struct rules* parse(const char* text) {
    struct rules* rs = calloc(1, sizeof *rs);
    if (!rs) return NULL;
    char* copy = strdup(text ? text : "");
    char* save = NULL;
    for (char* item = strtok_r(copy, ";\n", &save); item && rs->n < MAX_RULES;
         item = strtok_r(NULL, ";\n", &save)) {
        while (*item == ' ' || *item == '\t') ++item;
        if (*item == '\0' || *item == '#') continue;
        char op[32] = {0}, target[128] = {0}, effect[32] = {0};
        double p = 0;
        long limit = -1;
        int got = sscanf(item, "%31[^:]:%127[^:]:%31[^:]:%lf:%ld", op, target, effect, &p, &limit);
        struct rule* r = &rs->r[rs->n];
        int which = -1;
        for (int i = 0; i < OP_COUNT; ++i)
            if (strcmp(op, op_names[i]) == 0) which = i;
        r->delay_ms = 0;
        r->effect = errno_named(effect, &r->delay_ms);
        if (got < 4 || which < 0 || r->effect == 0) {
            fprintf(stderr, "fault_shim: ignoring the malformed rule \"%s\"\n", item);
            continue;
        }
        r->op = (enum op)which;
        snprintf(r->target, sizeof r->target, "%s", target);
        r->probability = p;
        r->limit = got == 5 ? limit : -1;
        atomic_init(&r->used, 0);
        ++rs->n;
    }
    free(copy);
    return rs;
}

static void note(enum op op, const char* target, int effect) {
    if (log_fd < 0) return;
    char line[256];
    int n = snprintf(line, sizeof line, "%s %s %s\n", op_names[op], target, effect_name(effect));
    pthread_mutex_lock(&log_mu);
    if (n > 0) (void)!real_write(log_fd, line, (size_t)n);
    pthread_mutex_unlock(&log_mu);
}

static double uniform(void) {
    static __thread unsigned long state;
    if (state == 0) state = (seed_base ^ (0x9e3779b97f4a7c15ul * (atomic_fetch_add(&thread_counter, 1) + 1))) | 1;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (double)(state >> 11) / (double)(1ul << 53);
}

static int matches(const struct rule* r, int fd, const char* path) {
    if (strcmp(r->target, "*") == 0) return 1;
    if (strcmp(r->target, "sock") == 0)
        return fd >= 0 && fd < MAX_FDS && atomic_load_explicit(&fd_socket[fd], memory_order_relaxed);
    if (!path && fd >= 0 && fd < MAX_FDS)
        path = atomic_load_explicit(&fd_paths[fd], memory_order_acquire);
    return path && strstr(path, r->target) != NULL;
}

// The effect to inject into this call, or 0.
static int pick(enum op op, int fd, const char* path) {
    resolve();
    struct rules* rs = atomic_load_explicit(&current_rules, memory_order_acquire);
    if (!rs) return 0;
    for (int i = 0; i < rs->n; ++i) {
        struct rule* r = &rs->r[i];
        if (r->op != op || !matches(r, fd, path)) continue;
        if (uniform() >= r->probability) continue;
        if (r->limit >= 0 && atomic_fetch_add(&r->used, 1) >= r->limit) continue;
        note(op, r->target, r->effect);
        if (r->effect == EFFECT_SLOW) {
            struct timespec d = {r->delay_ms / 1000, (r->delay_ms % 1000) * 1000000L};
            while (nanosleep(&d, &d) != 0 && errno == EINTR) {
            }
            return 0;
        }
        return r->effect;
    }
    return 0;
}

static void remember(int fd, const char* path) {
    if (fd < 0 || fd >= MAX_FDS) return;
    if (!path && !atomic_load_explicit(&fd_paths[fd], memory_order_relaxed)) return;
    atomic_store_explicit(&fd_paths[fd], path ? strdup(path) : NULL, memory_order_release);
}

static void* control_loop(void* arg) {
    const char* path = arg;
    struct timespec last = {0, 0};
    off_t last_size = -1;
    for (;;) {
        struct stat st;
        if (stat(path, &st) == 0 &&
            (st.st_mtim.tv_sec != last.tv_sec || st.st_mtim.tv_nsec != last.tv_nsec ||
             st.st_size != last_size)) {
            last = st.st_mtim;
            last_size = st.st_size;
            FILE* f = fopen(path, "r");
            if (f) {
                char buf[4096];
                size_t n = fread(buf, 1, sizeof buf - 1, f);
                buf[n] = '\0';
                fclose(f);
                atomic_store_explicit(&current_rules, parse(buf), memory_order_release);
            }
        }
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

__attribute__((constructor)) static void init(void) {
    resolve();
    const char* seed = getenv("SMARM_FAULT_SEED");
    seed_base = seed ? strtoul(seed, NULL, 10) : 1;
    const char* log = getenv("SMARM_FAULT_LOG");
    if (log) log_fd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const char* faults = getenv("SMARM_FAULTS");
    if (faults) atomic_store(&current_rules, parse(faults));
    const char* control = getenv("SMARM_FAULT_CONTROL");
    if (control) {
        pthread_t t;
        if (pthread_create(&t, NULL, control_loop, strdup(control)) == 0) pthread_detach(t);
    }
}

// ---- the wrappers -----------------------------------------------------------

#define FAIL_WITH(e) \
    do {             \
        errno = (e); \
        return -1;   \
    } while (0)

static int open_common(int dirfd, const char* path, int flags, mode_t mode, int at) {
    int e = pick(OP_OPEN, -1, path);
    if (e > 0) FAIL_WITH(e);
    int fd = at ? real_openat(dirfd, path, flags, mode) : real_open(path, flags, mode);
    if (fd >= 0) {
        remember(fd, path);
        if (fd < MAX_FDS) atomic_store(&fd_socket[fd], 0);
    }
    return fd;
}

int open(const char* path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return open_common(AT_FDCWD, path, flags, mode, 0);
}
int open64(const char* path, int flags, ...) __attribute__((alias("open")));

int openat(int dirfd, const char* path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return open_common(dirfd, path, flags, mode, 1);
}
int openat64(int dirfd, const char* path, int flags, ...) __attribute__((alias("openat")));

ssize_t write(int fd, const void* buf, size_t n) {
    int e = pick(OP_WRITE, fd, NULL);
    if (e == EFFECT_SHORT && n > 1) return real_write(fd, buf, n / 2);
    if (e > 0) FAIL_WITH(e);
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
    int e = pick(OP_WRITE, fd, NULL);
    if (e == EFFECT_SHORT && n > 1) return real_pwrite(fd, buf, n / 2, off);
    if (e > 0) FAIL_WITH(e);
    return real_pwrite(fd, buf, n, off);
}
ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) __attribute__((alias("pwrite")));

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
    int e = pick(OP_WRITE, fd, NULL);
    if (e == EFFECT_SHORT && cnt > 0 && iov[0].iov_len > 1)
        return real_write(fd, iov[0].iov_base, iov[0].iov_len / 2);
    if (e > 0) FAIL_WITH(e);
    return real_writev(fd, iov, cnt);
}

int fdatasync(int fd) {
    int e = pick(OP_FDATASYNC, fd, NULL);
    if (e > 0) FAIL_WITH(e);
    return real_fdatasync(fd);
}

int fsync(int fd) {
    int e = pick(OP_FSYNC, fd, NULL);
    if (e > 0) FAIL_WITH(e);
    return real_fsync(fd);
}

int ftruncate(int fd, off_t len) {
    int e = pick(OP_FTRUNCATE, fd, NULL);
    if (e > 0) FAIL_WITH(e);
    return real_ftruncate(fd, len);
}
int ftruncate64(int fd, off_t len) __attribute__((alias("ftruncate")));

int rename(const char* from, const char* to) {
    int e = pick(OP_RENAME, -1, from);
    if (e > 0) FAIL_WITH(e);
    return real_rename(from, to);
}

static int accepted(int fd) {
    if (fd >= 0 && fd < MAX_FDS) {
        remember(fd, NULL);
        atomic_store(&fd_socket[fd], 1);
    }
    return fd;
}

int accept(int s, struct sockaddr* a, socklen_t* l) {
    int e = pick(OP_ACCEPT, s, NULL);
    if (e > 0) FAIL_WITH(e);
    return accepted(real_accept(s, a, l));
}

int accept4(int s, struct sockaddr* a, socklen_t* l, int flags) {
    int e = pick(OP_ACCEPT, s, NULL);
    if (e > 0) FAIL_WITH(e);
    return accepted(real_accept4(s, a, l, flags));
}

ssize_t send(int fd, const void* buf, size_t n, int flags) {
    int e = pick(OP_SEND, fd, NULL);
    if (e == EFFECT_SHORT && n > 1) return real_send(fd, buf, n / 2, flags);
    if (e > 0) FAIL_WITH(e);
    return real_send(fd, buf, n, flags);
}

ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* a,
               socklen_t l) {
    int e = pick(OP_SEND, fd, NULL);
    if (e == EFFECT_SHORT && n > 1) return real_sendto(fd, buf, n / 2, flags, a, l);
    if (e > 0) FAIL_WITH(e);
    return real_sendto(fd, buf, n, flags, a, l);
}

ssize_t sendmsg(int fd, const struct msghdr* m, int flags) {
    int e = pick(OP_SEND, fd, NULL);
    if (e > 0) FAIL_WITH(e);
    return real_sendmsg(fd, m, flags);
}

ssize_t recv(int fd, void* buf, size_t n, int flags) {
    int e = pick(OP_RECV, fd, NULL);
    if (e > 0) FAIL_WITH(e);
    return real_recv(fd, buf, n, flags);
}

ssize_t recvfrom(int fd, void* buf, size_t n, int flags, struct sockaddr* a, socklen_t* l) {
    int e = pick(OP_RECV, fd, NULL);
    if (e > 0) FAIL_WITH(e);
    return real_recvfrom(fd, buf, n, flags, a, l);
}

int close(int fd) {
    resolve();
    if (fd >= 0 && fd < MAX_FDS) {
        atomic_store(&fd_socket[fd], 0);
        remember(fd, NULL);
    }
    return real_close(fd);
}
