/* folders.h — output folders made in-process (never through a shell): `mkdir -p` with the
 * user's umask, the result checked to be a writable folder.
 * Not for: files (outfile.h) or checkpoints' own folder protocol (checkpoint.c). */
#ifndef CTRAIN_HOST_FOLDERS_H
#define CTRAIN_HOST_FOLDERS_H

#include <ctrain/ctrain.h>

/* Create `dir` and every missing folder above it (mode 0777 & ~umask). CT_ERR_IO naming the
 * folder that could not be made (or that exists and is not a writable folder), its reason,
 * and "---> <hint>"; CT_ERR_INVALID for a name longer than PATH_MAX. */
int32_t folder_make(const char *dir, const char *hint, ct_error *err);

#endif /* CTRAIN_HOST_FOLDERS_H */
