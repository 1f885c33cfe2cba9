/* bpe.h — byte-level BPE, GPT-2's tokenizer and its family (Llama-3's, Qwen2's): a vocabulary
 * of byte strings and merge priorities read from a tiktoken ranks file, a Hugging Face
 * tokenizer.json (model BPE; pre-tokenizer ByteLevel, or a Sequence of a Split regex and
 * ByteLevel without its regex; normalizer none or NFC; added tokens) or vocab.json with
 * merges.txt; text split by the pattern (GPT-2's, or the Split's: PCRE2, Unicode letter and
 * number classes), each piece merged pair by pair, lowest rank first.
 * Not for: sentencepiece (tokenizer.h), shards (prepare.c), writing Hugging Face files
 * (bpe_write.h).
 *
 * What text becomes (the same ids as tiktoken's encode_ordinary and the tokenizers library):
 *   - ill-formed UTF-8: each maximal ill-formed subpart becomes U+FFFD first, as Python's
 *     bytes.decode("utf-8", errors="replace") makes the str those libraries take;
 *   - special tokens' text ("<|endoftext|>" in the input) is ordinary text, as tiktoken's
 *     encode_ordinary and llm.c's data scripts treat it; the end-of-text id is placed by
 *     `ctrain prepare` before each document, never read from the text. bpe_encode_ex with
 *     BPE_ENCODE_SPECIALS matches the added tokens first instead, as the tokenizers library's
 *     encode does (leftmost, longest first; the text between them pre-tokenized alone);
 *   - NFC (a tokenizer.json's normalizer) is applied to the text between added tokens;
 *   - a Split pre-tokenizer (behavior Isolated) makes each match and each gap between matches
 *     a piece, as the tokenizers library does.
 * Merge rules: a tiktoken file ranks byte strings (two adjacent parts merge when their
 * concatenation has a rank; a piece that is itself a token is that token); Hugging Face files
 * rank pairs (merges.txt's order).
 */
#ifndef CTRAIN_HOST_BPE_H
#define CTRAIN_HOST_BPE_H

#include <ctrain/ctrain.h>

#include <stddef.h>

#define BPE_EOT_TEXT "<|endoftext|>"
#define BPE_EOT_TEXT_LLAMA3 "<|end_of_text|>" /* the end-of-text token when there is no other */
#define BPE_ENCODE_SPECIALS 1u /* bpe_encode_ex: added tokens in the text become their ids */
#define BPE_MAX_FILE (256u << 20) /* a tokenizer file larger than this is refused */

typedef struct bpe_model bpe_model;

typedef enum bpe_format {
    BPE_TIKTOKEN = 0,   /* NAME.tiktoken: "base64-of-bytes rank" per line */
    BPE_HF_JSON = 1,    /* tokenizer.json */
    BPE_HF_VOCAB = 2,   /* vocab.json + merges.txt (either named; the other beside it) */
} bpe_format;

/* Load `path`, its format told by its name (*.tiktoken, merges.txt) or its content (a JSON
 * object with "model": tokenizer.json; another object: vocab.json). Every byte 0..255 must be
 * a token; an end-of-text token <|endoftext|> is the tokenizer.json's added token or vocab
 * entry of that text (else Llama-3's <|end_of_text|>), and for a tiktoken file the id after the
 * largest rank (GPT-2's 50256). A tokenizer.json's pre-tokenizer, normalizer or added token
 * that ctrain does not read (another type, a Split with another behavior, lstrip...) is
 * refused naming its JSON path. CT_ERR_INVALID naming the file, the line, token or JSON path,
 * and what to do. */
int32_t bpe_load(const char *path, bpe_model **out, ct_error *err);
/* The same from a file's text already read (n bytes; `path` names it and tells its format by
 * name as bpe_load does; a vocab.json's merges.txt is still read beside path). */
int32_t bpe_load_text(const char *path, const char *text, size_t n, bpe_model **out,
                      ct_error *err);
void bpe_free(bpe_model *m);

/* A byte-level model without merges: token b is byte b (0..255), and with eot the token 256 is
 * <|endoftext|> (ctrain's bytes tokenizer, written for Hugging Face). */
bpe_model *bpe_bytes_model(int with_eot, ct_error *err);

bpe_format bpe_model_format(const bpe_model *m);
const char *bpe_format_name(bpe_format f); /* "tiktoken", "tokenizer.json", "vocab.json" */
/* Ids are 0..V-1 (specials included); an id without bytes (a hole) is never produced. */
int32_t bpe_vocab_size(const bpe_model *m);
/* The <|endoftext|> id, -1 when the model has none. */
int32_t bpe_eot_id(const bpe_model *m);
/* The bytes of token id (*len of them), NULL for a hole or an id outside 0..V-1. */
const unsigned char *bpe_token_bytes(const bpe_model *m, int32_t id, size_t *len);
/* 1 when id is an added (special) token, whose bytes are literal text. */
int bpe_is_special(const bpe_model *m, int32_t id);
/* The Split pre-tokenizer's pattern (a PCRE2 regex, or literal text when *literal), NULL for
 * ByteLevel's own (GPT-2's); whether the tokenizer normalizes to NFC. For writing it back. */
const char *bpe_split_pattern(const bpe_model *m, int *literal);
int bpe_normalizes_nfc(const bpe_model *m);
/* A Digits pre-tokenizer before ByteLevel's regex (SmolLM's shape): 0 none, or how it splits. */
enum { BPE_DIGITS_RUNS = 1, BPE_DIGITS_ONE = 2 };
int32_t bpe_digits(const bpe_model *m);

/* The merges in priority order: pair k merges left[k] and right[k] (ids). A tiktoken model's
 * are recovered from its ranks (each token of two bytes or more is the merge of the two parts
 * that BPE with the lower ranks leaves of its bytes). *n set; the arrays are the model's. */
int32_t bpe_merges(bpe_model *m, const int32_t **left, const int32_t **right, int32_t *n,
                   ct_error *err);
/* 1 when a piece that is itself a token is that token without merging (tiktoken's rule;
 * tokenizer.json's "ignore_merges"). */
int bpe_ignores_merges(const bpe_model *m);

/* Encode len bytes of text (any bytes; see the header comment). *ids malloc'ed (the caller
 * frees it), *n ids. Thread-safe: the model is only read. bpe_encode treats added tokens' text
 * as ordinary text; bpe_encode_ex with flags BPE_ENCODE_SPECIALS matches them first. */
int32_t bpe_encode(const bpe_model *m, const char *text, size_t len, int32_t **ids, int64_t *n,
                   ct_error *err);
int32_t bpe_encode_ex(const bpe_model *m, const char *text, size_t len, uint32_t flags,
                      int32_t **ids, int64_t *n, ct_error *err);
/* The bytes of n ids with ill-formed UTF-8 replaced by U+FFFD (tiktoken's decode).
 * *text malloc'ed and NUL-terminated, *len bytes. CT_ERR_INVALID for an id outside the model. */
int32_t bpe_decode(const bpe_model *m, const int32_t *ids, int64_t n, char **text, size_t *len,
                   ct_error *err);

/* A place to cut text for encoding in parts: the largest p in [lo, hi] (lo >= 2, hi < len)
 * where the model's pattern ends a piece whatever precedes or follows the two sides, so
 * encoding text[0, p) and text[p, len) gives the ids of encoding it whole; 0 when there is
 * none. GPT-2's places: between two printable ASCII characters of different kinds (letter,
 * digit, other), except an apostrophe before a letter (a contraction); after a newline, tab,
 * CR, VT or FF that follows a printable ASCII character and precedes one. Llama-3's and
 * Qwen2's patterns: the same but never before a letter that follows punctuation, a tab, VT or
 * FF (those patterns join one such character to the letters after it). Any other Split
 * pattern: no place (0). */
size_t bpe_cut_before(const bpe_model *m, const char *text, size_t len, size_t lo, size_t hi);
/* The same searched upwards: the smallest such p in [lo, hi]. */
size_t bpe_cut_after(const bpe_model *m, const char *text, size_t len, size_t lo, size_t hi);
/* Where neither finds a place (a run of one kind, a line of 20 MB of one letter): text[0] must
 * start a piece. When a piece of the pattern (GPT-2's, Llama-3's or Qwen2's; never with NFC)
 * longer than 64 KiB starts in the first hi bytes
 * (bpe_encode merges such a piece in segments of at most 64 KiB), the end of one of its
 * segments: the last at or below hi, else the first; encoding text[0, p) and text[p, len) then
 * gives the ids of encoding it whole. 0 when there is none, or the text read is not UTF-8. It
 * reads at most hi + 64 KiB + 64 bytes of text. */
size_t bpe_cut_in_long_piece(const bpe_model *m, const char *text, size_t len, size_t hi);

#endif /* CTRAIN_HOST_BPE_H */
