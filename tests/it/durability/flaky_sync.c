/*
 * A disk whose flushes fail the way Linux's do (D40), for the tests in flush.rs.
 *
 * Built two ways from this one file, so the log format has one definition:
 *
 *   cc -shared -fPIC -o libflaky_sync.so flaky_sync.c -ldl -lpthread
 *       LD_PRELOAD'ed under the service. For every file whose path starts with
 *       $FLAKY_SYNC_FILES (except SQLite's -shm, which is never flushed), it remembers which
 *       4 KiB pages were written since their last successful sync, and logs each page's
 *       durable content to $FLAKY_SYNC_LOG before the first write that changes it. fsync and
 *       fdatasync fail with EIO as $FLAKY_SYNC_CONTROL says. A failed sync does what Linux
 *       does on a failed writeback: the pages it covered are marked clean, so the next sync
 *       succeeds without them, and they are lost at the next power cut unless written again.
 *
 *   cc -DPOWER_CUT -o power_cut flaky_sync.c
 *       `power_cut LOG`: what a power cut leaves, applied to the files after the service is
 *       gone: every page not durable gets its durable content back and every file its
 *       durable size. Prints one line of counts.
 *
 * The control file holds one line, re-read at every sync of a tracked file:
 *   <generation> none
 *   <generation> once <target>              fail the next matching sync
 *   <generation> random <p> <seed> [target] fail each matching sync with probability p
 * A new generation starts the rule afresh. Targets: wal-fsync (a commit: fsync of the -wal
 * file), db-fsync (SQLite's checkpoint: fsync of the database file), db-fdatasync (the
 * service's own flush, Rust's sync_data), any (the default).
 *
 * The log is kept across restarts of the service: the library reads it at start, so pages
 * lost by a failed sync before a restart stay lost. Records: a header (kind, file, a, len)
 * and len bytes. 'P' a file's path (a: its size when first seen), 'U' a page's durable
 * content (a: page), 'D' a lost page written again (a: page), 'S' a sync that succeeded and
 * 'F' one that failed (a: the file's size), 'T' a truncation (a: the new size).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define PAGE 4096
#define MAX_FILES 64
#define PATH_MAX_LEN 1024

enum { DURABLE = 0, DIRTY = 1, LOST = 2 };

struct rec {
    uint32_t kind;
    uint32_t file;
    uint64_t a;
    uint32_t len;
    uint32_t pad;
};

struct file {
    char path[PATH_MAX_LEN];
    uint64_t durable_size;
    uint8_t *state;     /* per page: DURABLE, DIRTY or LOST */
    uint64_t *image;    /* per page: the log offset of its durable content (POWER_CUT) */
    uint32_t *image_len;
    uint64_t pages;
};

static struct file files[MAX_FILES];
static uint32_t nfiles;

static int grow(struct file *f, uint64_t page) {
    if (page < f->pages) return 0;
    uint64_t n = f->pages ? f->pages : 1024;
    while (n <= page) n *= 2;
    uint8_t *s = realloc(f->state, n);
    uint64_t *im = realloc(f->image, n * sizeof *im);
    uint32_t *il = realloc(f->image_len, n * sizeof *il);
    if (!s || !im || !il) abort();
    memset(s + f->pages, DURABLE, n - f->pages);
    memset(im + f->pages, 0, (n - f->pages) * sizeof *im);
    memset(il + f->pages, 0, (n - f->pages) * sizeof *il);
    f->state = s;
    f->image = im;
    f->image_len = il;
    f->pages = n;
    return 0;
}

/* One record's effect on the model; `data_at` is where its bytes are in the log. */
static void apply(const struct rec *r, const char *data, uint64_t data_at) {
    if (r->kind == 'P') {
        if (r->file != nfiles || nfiles >= MAX_FILES) return;
        struct file *f = &files[nfiles++];
        uint32_t n = r->len < PATH_MAX_LEN - 1 ? r->len : PATH_MAX_LEN - 1;
        memcpy(f->path, data, n);
        f->path[n] = 0;
        f->durable_size = r->a;
        return;
    }
    if (r->file >= nfiles) return;
    struct file *f = &files[r->file];
    switch (r->kind) {
    case 'U':
        grow(f, r->a);
        f->state[r->a] = DIRTY;
        f->image[r->a] = data_at;
        f->image_len[r->a] = r->len;
        break;
    case 'D':
        grow(f, r->a);
        f->state[r->a] = DIRTY;
        break;
    case 'S':
        for (uint64_t p = 0; p < f->pages; p++)
            if (f->state[p] == DIRTY) f->state[p] = DURABLE;
        f->durable_size = r->a;
        break;
    case 'F':
        for (uint64_t p = 0; p < f->pages; p++)
            if (f->state[p] == DIRTY) f->state[p] = LOST;
        break;
    default: /* 'T' changes nothing durable by itself */
        break;
    }
}

/* Reads the log into the model; returns how many syncs failed. A record cut short by a kill
 * ends the log. */
static uint64_t replay(int fd, ssize_t (*rd)(int, void *, size_t, off_t)) {
    uint64_t at = 0, failed = 0;
    static char data[PATH_MAX_LEN > PAGE ? PATH_MAX_LEN : PAGE];
    struct rec r;
    for (;;) {
        if (rd(fd, &r, sizeof r, (off_t)at) != (ssize_t)sizeof r) break;
        if (r.len > sizeof data) break;
        if (r.len && rd(fd, data, r.len, (off_t)(at + sizeof r)) != (ssize_t)r.len) break;
        apply(&r, data, at + sizeof r);
        if (r.kind == 'F') failed++;
        at += sizeof r + r.len;
    }
    return failed;
}

#ifdef POWER_CUT

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: power_cut LOG\n");
        return 2;
    }
    int log = open(argv[1], O_RDONLY);
    if (log < 0) {
        perror(argv[1]);
        return 1;
    }
    uint64_t failed = replay(log, pread);
    uint64_t restored = 0, lost = 0;
    static char buf[PAGE];
    for (uint32_t i = 0; i < nfiles; i++) {
        struct file *f = &files[i];
        int fd = open(f->path, O_RDWR);
        if (fd < 0) continue; /* never created for good */
        if (ftruncate(fd, (off_t)f->durable_size) != 0) return 1;
        for (uint64_t p = 0; p < f->pages; p++) {
            if (f->state[p] == DURABLE || p * PAGE >= f->durable_size) continue;
            uint64_t end = f->durable_size - p * PAGE < PAGE ? f->durable_size - p * PAGE : PAGE;
            uint32_t n = f->image_len[p] < end ? f->image_len[p] : (uint32_t)end;
            memset(buf, 0, sizeof buf);
            if (n && pread(log, buf, n, (off_t)f->image[p]) != (ssize_t)n) return 1;
            if (pwrite(fd, buf, end, (off_t)(p * PAGE)) != (ssize_t)end) return 1;
            restored++;
            if (f->state[p] == LOST) lost++;
        }
        fsync(fd);
        close(fd);
    }
    printf("power cut: %u files, %llu pages taken back (%llu of them lost by a failed sync), "
           "%llu syncs failed\n",
           nfiles, (unsigned long long)restored, (unsigned long long)lost,
           (unsigned long long)failed);
    return 0;
}

#else /* the preloaded library */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ready, log_fd = -1;
static char prefix[PATH_MAX_LEN], control[PATH_MAX_LEN];
static uint64_t rng, generation = UINT64_MAX, consumed;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_close)(int);

/* Which file each descriptor is: -1 not tracked, -2 not looked at yet. */
#define FDS 65536
static int fd_file[FDS];

static void say(const char *fmt, ...) {
    char line[PATH_MAX_LEN + 128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0 && real_write) real_write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line);
}

static void log_rec(uint32_t kind, uint32_t file, uint64_t a, const void *data, uint32_t len) {
    static char buf[sizeof(struct rec) + PATH_MAX_LEN + PAGE];
    struct rec r = {kind, file, a, len, 0};
    memcpy(buf, &r, sizeof r);
    if (len) memcpy(buf + sizeof r, data, len);
    /* One write per record: a kill never leaves half a header behind a whole one. */
    if (real_write(log_fd, buf, sizeof r + len) != (ssize_t)(sizeof r + len)) {
        say("flaky-sync: cannot write the log: %s\n", strerror(errno));
        abort();
    }
}

static void init(void) {
    if (ready) return;
    ready = 1;
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_close = dlsym(RTLD_NEXT, "close");
    for (int i = 0; i < FDS; i++) fd_file[i] = -2;
    const char *p = getenv("FLAKY_SYNC_FILES"), *l = getenv("FLAKY_SYNC_LOG"),
               *c = getenv("FLAKY_SYNC_CONTROL");
    if (p && l && c) {
        snprintf(prefix, sizeof prefix, "%s", p);
        snprintf(control, sizeof control, "%s", c);
        log_fd = open(l, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log_fd < 0) {
            say("flaky-sync: cannot open %s: %s\n", l, strerror(errno));
            abort();
        }
        replay(log_fd, pread);
    }
}

/* At load time, before the program has threads. */
__attribute__((constructor)) static void start(void) { init(); }

static int tracked_path(const char *path) {
    size_t n = strlen(prefix), len = strlen(path);
    if (!n || strncmp(path, prefix, n) != 0) return 0;
    return !(len >= 4 && strcmp(path + len - 4, "-shm") == 0);
}

/* The tracked file behind `fd`, or -1. Called with the lock held. */
static int file_of(int fd) {
    if (log_fd < 0 || fd < 0) return -1;
    if (fd < FDS && fd_file[fd] != -2) return fd_file[fd];
    char link[64], path[PATH_MAX_LEN];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    int found = -1;
    if (n > 0) {
        path[n] = 0;
        if (tracked_path(path)) {
            for (uint32_t i = 0; i < nfiles; i++)
                if (strcmp(files[i].path, path) == 0) found = (int)i;
            if (found < 0 && nfiles < MAX_FILES) {
                struct stat st;
                uint64_t size = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
                log_rec('P', nfiles, size, path, (uint32_t)strlen(path));
                struct rec r = {'P', nfiles, size, (uint32_t)strlen(path), 0};
                apply(&r, path, 0);
                found = (int)nfiles - 1;
            }
        }
    }
    if (fd < FDS) fd_file[fd] = found;
    return found;
}

/* Before a write of [off, off + len) to tracked file `i`: log the durable content of every
 * page it changes for the first time since that page was last synced. */
static void before_write(int fd, int i, uint64_t off, uint64_t len) {
    if (!len) return;
    struct file *f = &files[i];
    static char buf[PAGE];
    for (uint64_t p = off / PAGE; p <= (off + len - 1) / PAGE; p++) {
        grow(f, p);
        if (f->state[p] == DIRTY) continue;
        if (f->state[p] == LOST) {
            log_rec('D', (uint32_t)i, p, NULL, 0);
            f->state[p] = DIRTY;
            continue;
        }
        ssize_t n = pread(fd, buf, PAGE, (off_t)(p * PAGE));
        if (n < 0) n = 0;
        log_rec('U', (uint32_t)i, p, buf, (uint32_t)n);
        f->state[p] = DIRTY;
        f->image_len[p] = (uint32_t)n;
    }
}

static uint64_t size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Whether this sync fails, by the control file's rule. */
static int should_fail(int i, int data_only) {
    char line[256] = {0};
    int fd = open(control, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, line, sizeof line - 1, 0);
    real_close(fd);
    if (n <= 0) return 0;
    unsigned long long gen = 0, seed = 0;
    char rule[32] = {0}, a[64] = {0}, b[64] = {0}, c[64] = {0};
    if (sscanf(line, "%llu %31s %63s %63s %63s", &gen, rule, a, b, c) < 2) return 0;
    if (gen != generation) {
        generation = gen;
        consumed = 0;
        rng = 0;
    }
    const char *target = strcmp(rule, "random") == 0 ? c : a;
    size_t len = strlen(files[i].path);
    int wal = len > 4 && strcmp(files[i].path + len - 4, "-wal") == 0;
    const char *kind = wal ? (data_only ? "wal-fdatasync" : "wal-fsync")
                           : (data_only ? "db-fdatasync" : "db-fsync");
    if (*target && strcmp(target, "any") != 0 && strcmp(target, kind) != 0) return 0;
    if (strcmp(rule, "once") == 0) return consumed++ == 0;
    if (strcmp(rule, "random") == 0) {
        if (!rng) {
            /* Each process its own sequence: a restarted service does not fail at the same
             * sync again and again. */
            seed = strtoull(b, NULL, 10) ^ ((uint64_t)getpid() << 20);
            rng = seed ? seed : 0x9E3779B97F4A7C15ull;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (double)(rng >> 11) / (double)(1ull << 53) < strtod(a, NULL);
    }
    return 0;
}

static int sync_common(int fd, int data_only) {
    init();
    pthread_mutex_lock(&lock);
    int i = file_of(fd);
    if (i < 0) {
        pthread_mutex_unlock(&lock);
        return data_only ? real_fdatasync(fd) : real_fsync(fd);
    }
    struct file *f = &files[i];
    int rc;
    if (should_fail(i, data_only)) {
        uint64_t lost = 0;
        for (uint64_t p = 0; p < f->pages; p++) lost += f->state[p] == DIRTY;
        log_rec('F', (uint32_t)i, size_of(fd), NULL, 0);
        for (uint64_t p = 0; p < f->pages; p++)
            if (f->state[p] == DIRTY) f->state[p] = LOST;
        say("flaky-sync: %s of %s fails with EIO; %llu page(s) marked clean unwritten\n",
            data_only ? "fdatasync" : "fsync", f->path, (unsigned long long)lost);
        errno = EIO;
        rc = -1;
    } else {
        rc = data_only ? real_fdatasync(fd) : real_fsync(fd);
        if (rc == 0) {
            uint64_t size = size_of(fd);
            log_rec('S', (uint32_t)i, size, NULL, 0);
            for (uint64_t p = 0; p < f->pages; p++)
                if (f->state[p] == DIRTY) f->state[p] = DURABLE;
            f->durable_size = size;
        }
    }
    int saved = errno;
    pthread_mutex_unlock(&lock);
    errno = saved;
    return rc;
}

int fsync(int fd) { return sync_common(fd, 0); }
int fdatasync(int fd) { return sync_common(fd, 1); }

/* Runs a write to `fd` at `off` (or the current offset when off < 0) under the lock, after
 * logging what it changes. */
#define TRACKED_WRITE(fd, off, len, call)                                                     \
    do {                                                                                      \
        init();                                                                               \
        pthread_mutex_lock(&lock);                                                            \
        int i_ = file_of(fd);                                                                 \
        if (i_ >= 0) {                                                                        \
            int64_t at_ = (off) >= 0 ? (int64_t)(off) : (int64_t)lseek(fd, 0, SEEK_CUR);      \
            if (at_ >= 0 && (fcntl(fd, F_GETFL) & O_APPEND)) at_ = (int64_t)size_of(fd);     \
            if (at_ >= 0) before_write(fd, i_, (uint64_t)at_, (uint64_t)(len));              \
        }                                                                                     \
        ssize_t rc_ = (call);                                                                 \
        int saved_ = errno;                                                                   \
        pthread_mutex_unlock(&lock);                                                          \
        errno = saved_;                                                                       \
        return rc_;                                                                           \
    } while (0)

static size_t iov_len(const struct iovec *iov, int n) {
    size_t len = 0;
    for (int k = 0; k < n; k++) len += iov[k].iov_len;
    return len;
}

ssize_t write(int fd, const void *buf, size_t n) {
    if (!ready) init();
    if (fd == log_fd || fd <= 2) return real_write(fd, buf, n);
    TRACKED_WRITE(fd, -1, n, real_write(fd, buf, n));
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    TRACKED_WRITE(fd, off, n, real_pwrite(fd, buf, n, off));
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    TRACKED_WRITE(fd, off, n, real_pwrite64(fd, buf, n, off));
}
ssize_t writev(int fd, const struct iovec *iov, int n) {
    TRACKED_WRITE(fd, -1, iov_len(iov, n), real_writev(fd, iov, n));
}
ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
    TRACKED_WRITE(fd, off, iov_len(iov, n), real_pwritev(fd, iov, n, off));
}

/* A truncation takes away the durable content of the pages past the new end (and changes
 * the page it ends in): log it first, as a write would. */
static int truncate_common(int fd, uint64_t size, int wide) {
    init();
    pthread_mutex_lock(&lock);
    int i = file_of(fd);
    if (i >= 0) {
        uint64_t old = size_of(fd);
        if (size < old) before_write(fd, i, size, old - size);
        log_rec('T', (uint32_t)i, size, NULL, 0);
    }
    int rc = wide ? real_ftruncate64(fd, (off64_t)size) : real_ftruncate(fd, (off_t)size);
    int saved = errno;
    pthread_mutex_unlock(&lock);
    errno = saved;
    return rc;
}

int ftruncate(int fd, off_t size) { return truncate_common(fd, (uint64_t)size, 0); }
int ftruncate64(int fd, off64_t size) { return truncate_common(fd, (uint64_t)size, 1); }

int close(int fd) {
    init();
    pthread_mutex_lock(&lock);
    if (fd >= 0 && fd < FDS) fd_file[fd] = -2;
    pthread_mutex_unlock(&lock);
    return real_close(fd);
}

#endif
