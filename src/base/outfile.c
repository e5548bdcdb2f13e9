/* base/outfile: output files written whole or not at all. The bytes go to a temporary file that
 * mkstemp makes in the destination's folder (a name no one else holds), are flushed to disk, and the
 * file is renamed over the destination only when the caller commits; on any failure the temporary
 * is removed and the destination is as it was. What is at the destination decides what may happen:
 * nothing or a regular file is replaced; a symbolic link is written through (its target, a regular
 * file or nothing, is replaced and the link stays); a device, folder, pipe or socket is refused, so
 * `-o /dev/null` run as root cannot turn a device node into a file. Messages name the path the
 * caller gave, never the temporary. */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The process's umask, read from /proc (umask(2) can only read it by changing it, which races with
 * other threads creating files); 022 where /proc does not say. */
static mode_t current_umask(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned mask = 022;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &mask) == 1) break;
    if (f) fclose(f);
    return (mode_t)mask;
}

etch_status base_out_open(base_outfile *o, const char *path, etch_error *err) {
    memset(o, 0, sizeof *o);
    o->path = path;
    struct stat st;
    char target[PATH_MAX];
    int linked = 0;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) { /* write through the link to its target */
        linked = 1;
        if (!realpath(path, target)) { /* dangling: write the name it points at */
            char link[PATH_MAX];
            ssize_t n = readlink(path, link, sizeof link - 1);
            if (n <= 0) return base_fail(err, ETCH_ERR_IO, "%s: cannot read the link: %s", path, strerror(errno));
            link[n] = '\0';
            const char *slash = strrchr(path, '/');
            int dl = link[0] == '/' || !slash ? 0 : (int)(slash - path + 1); /* relative to the link's folder */
            if (snprintf(target, sizeof target, "%.*s%s", dl, path, link) >= (int)sizeof target)
                return base_fail(err, ETCH_ERR_IO, "%s: the link's target is too long", path);
        }
        if (stat(target, &st) != 0) st.st_mode = S_IFREG; /* nothing there yet */
    } else if (lstat(path, &st) != 0) {
        st.st_mode = S_IFREG;
    }
    if (!S_ISREG(st.st_mode))
        return base_fail(err, ETCH_ERR_IO, "%s exists and is not a regular file (%s): etch writes only regular files",
                         path, S_ISDIR(st.st_mode) ? "a folder" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                               : S_ISFIFO(st.st_mode) ? "a pipe" : "a socket or other");
    const char *dest = linked ? target : path, *slash = strrchr(dest, '/');
    size_t dl = slash ? (size_t)(slash - dest + 1) : 0, bl = strlen(dest) - dl;
    o->final = base_malloc(strlen(dest) + 1);
    o->tmp = base_malloc(dl + 1 + bl + 8 + 1);
    if (!o->final || !o->tmp) {
        base_free(o->final), base_free(o->tmp);
        o->final = o->tmp = NULL;
        return base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory", path);
    }
    strcpy(o->final, dest);
    /* DIR/.NAME.XXXXXX: hidden, beside the destination (rename stays in one file system) */
    memcpy(o->tmp, dest, dl);
    o->tmp[dl] = '.';
    memcpy(o->tmp + dl + 1, dest + dl, bl);
    memcpy(o->tmp + dl + 1 + bl, ".XXXXXX", 8);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        etch_status s = base_fail(err, ETCH_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        base_free(o->final), base_free(o->tmp);
        o->final = o->tmp = NULL;
        return s;
    }
    /* mkstemp makes 0600; a written file gets the usual 0666 less the umask. */
    (void)!fchmod(fd, 0666 & ~current_umask()); /* a failure leaves 0600: still the caller's file */
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        etch_status s = base_fail(err, ETCH_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        base_out_abort(o);
        return s;
    }
    return ETCH_OK;
}

etch_status base_out_finish(base_outfile *o, etch_error *err) {
    if (!o->f) return base_fail(err, ETCH_ERR_IO, "%s: not open for writing", o->path);
    int ok = fflush(o->f) == 0 && fsync(fileno(o->f)) == 0, e = errno;
    if (fclose(o->f) != 0 && ok) ok = 0, e = errno;
    o->f = NULL;
    if (!ok) {
        base_out_abort(o);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot write: %s", o->path, strerror(e));
    }
    return ETCH_OK;
}

etch_status base_out_commit(base_outfile *o, etch_error *err) {
    if (o->f) {
        etch_status st = base_out_finish(o, err);
        if (st) return st;
    }
    if (!o->tmp || rename(o->tmp, o->final) != 0) {
        int e = errno;
        base_out_abort(o);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot write: %s", o->path, strerror(e));
    }
    base_free(o->tmp), base_free(o->final);
    o->tmp = o->final = NULL;
    return ETCH_OK;
}

void base_out_abort(base_outfile *o) {
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp);
    base_free(o->tmp), base_free(o->final);
    memset(o, 0, sizeof *o);
}
