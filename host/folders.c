/* folders.c — `mkdir -p` in-process (see folders.h). */
#include "folders.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int32_t folder_make(const char *dir, const char *hint, ct_error *err) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return ct_error_set(err, CT_ERR_INVALID, "folder name too long: %.200s... ---> %s", dir,
                            hint);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        goto fail;
    }
    if (access(dir, W_OK) != 0) goto fail;
    return CT_OK;
fail:
    return ct_error_set(err, CT_ERR_IO, "cannot create folder %s: %s ---> %s", tmp,
                        strerror(errno), hint);
}
