/* corpus.h — the text that `ctrain prepare` reads: the list of input files (files and folders,
 * recursively, sorted), each read as plain bytes or through zlib when its name ends in ".gz",
 * and the decoding of one JSON Lines record's string field into UTF-8.
 * Not for: tokenizing or writing shards (prepare.c).
 */
#ifndef CTRAIN_HOST_CORPUS_H
#define CTRAIN_HOST_CORPUS_H

#include <ctrain/ctrain.h>

#include <stddef.h>

/* The input files, in the order they are read. */
typedef struct corpus_files {
    char   **paths;   /* owned */
    int64_t *bytes;   /* size on disk of each (compressed size for .gz) */
    int32_t  n;
    uint64_t total_bytes;     /* sum of bytes */
    uint64_t total_estimate;  /* the text's size: .gz files count their gzip trailer's size */
} corpus_files;

/* Expand the command line's inputs: a regular file is taken as it is (anything else that is
 * not a folder is refused with its type, see open_regular); a folder is walked recursively,
 * its entries sorted by name (bytewise), and only its regular files are taken (FIFOs,
 * devices, sockets inside it are skipped). CT_ERR_IO / CT_ERR_INVALID naming the path. */
int32_t corpus_list(const char *const *args, int32_t n_args, corpus_files *out, ct_error *err);
void corpus_files_free(corpus_files *f);

/* One input file being read: plain bytes, or gunzipped when the name ends in ".gz". */
typedef struct corpus_reader corpus_reader;
corpus_reader *corpus_open(const char *path, ct_error *err);
/* Up to n bytes into buf: the count, 0 at the end, -1 with err filled (a corrupt .gz names the
 * file and zlib's reason). */
int64_t corpus_read(corpus_reader *r, char *buf, size_t n, ct_error *err);
void corpus_close(corpus_reader *r);

/* Decode the string value of key `field` of the JSON object on one line (len bytes, no
 * newline) and append it as UTF-8 to *out (*len_out bytes, *cap allocated, grown with
 * realloc): escapes \" \\ \/ \b \f \n \r \t and \uXXXX, surrogate pairs joined into one code
 * point. Returns 0, or -1 with a static reason in *why ("no key", "not a string", "bad escape",
 * "lone surrogate", "not a JSON object", "out of memory"). Other keys' values (strings,
 * numbers, objects, arrays, true/false/null) are skipped. */
int corpus_json_field(const char *line, size_t len, const char *field, char **out,
                      size_t *len_out, size_t *cap, const char **why);

#endif /* CTRAIN_HOST_CORPUS_H */
