// tokenizer.cc — the C shim (tokenizer.h) over libsentencepiece's C++ API. Every entry point
// catches C++ exceptions and turns them and sentencepiece's status into a ct_error.
// Not for: deciding how text becomes shards (prepare.c).
#include "data/tokenizer.h"

#include "io/files.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

// Exported by libsentencepiece (absl-style logging) but not declared in its public headers.
namespace sentencepiece {
namespace logging {
void SetMinLogLevel(int v);
}
}  // namespace sentencepiece

struct host_tokenizer {
    sentencepiece::SentencePieceProcessor sp;
};

namespace {

// Encode at most this many bytes per sentencepiece call, cut just after a newline: the models
// are trained without a dummy prefix or normalization, so cutting there changes nothing.
constexpr size_t kChunkBytes = TOKENIZER_CHUNK_BYTES;

}  // namespace

extern "C" int32_t tokenizer_train(const char *const *files, int32_t n_files,
                                   const char *model_type, int32_t vocab_size, int32_t threads,
                                   int64_t max_sentences, char **model, size_t *model_len,
                                   ct_error *err) {
    *model = nullptr;
    *model_len = 0;
    try {
        std::string type(model_type ? model_type : "bpe");
        if (type != "bpe" && type != "unigram")
            return ct_error_set(err, CT_ERR_INVALID, "sentencepiece model type '%s' is not "
                                "bpe or unigram", type.c_str());
        std::string input;
        for (int32_t i = 0; i < n_files; i++) {
            if (std::strchr(files[i], ','))
                return ct_error_set(err, CT_ERR_INVALID, "text file name %s contains a comma, "
                                    "which sentencepiece cannot take ---> rename or link it",
                                    files[i]);
            if (i) input += ",";
            input += files[i];
        }
        std::unordered_map<std::string, std::string> kw = {
            {"input", input},
            {"model_type", type},
            {"vocab_size", std::to_string(vocab_size)},
            {"num_threads", std::to_string(threads < 1 ? 1 : threads)},
            {"byte_fallback", "true"},
            {"normalization_rule_name", "identity"},
            {"add_dummy_prefix", "false"},
            {"remove_extra_whitespaces", "false"},
            {"character_coverage", "0.9995"},
            {"split_digits", "true"},
            {"input_sentence_size", std::to_string(max_sentences > 0 ? max_sentences : 0)},
            {"shuffle_input_sentence", "true"},
        };
        sentencepiece::logging::SetMinLogLevel(1);  // warnings and errors only
        std::string serialized;  // the model comes back here; sentencepiece writes no file
        auto status = sentencepiece::SentencePieceTrainer::Train(kw, nullptr, &serialized);
        if (!status.ok()) {
            // "Internal: ./src/x.cc(580) [expression] reason": keep the reason
            std::string why = status.ToString();
            size_t cut = why.rfind("] ");
            if (cut != std::string::npos) why = why.substr(cut + 2);
            return ct_error_set(err, CT_ERR_INVALID, "sentencepiece could not train a %s model "
                                "of %d pieces on %s%s: %s ---> adjust --vocab-size: it must "
                                "hold 259 pieces (bytes, <unk>, <s>, </s>) plus one per "
                                "distinct character of the text, and no more pieces than the "
                                "text supports", type.c_str(), vocab_size, files[0],
                                n_files > 1 ? " and more" : "", why.c_str());
        }
        if (!(*model = static_cast<char *>(std::malloc(serialized.size() + 1))))
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory keeping the trained model");
        std::memcpy(*model, serialized.data(), serialized.size());
        *model_len = serialized.size();
        return CT_OK;
    } catch (const std::exception &e) {
        return ct_error_set(err, CT_ERR_INTERNAL, "sentencepiece training failed: %s", e.what());
    }
}

extern "C" host_tokenizer *tokenizer_from_bytes(const void *model, size_t len,
                                                 const char *name, ct_error *err) {
    try {
        host_tokenizer *tok = new host_tokenizer();
        auto status = tok->sp.LoadFromSerializedProto(
            absl::string_view(static_cast<const char *>(model), len));
        if (!status.ok()) {
            ct_error_set(err, CT_ERR_INVALID, "%s is not a sentencepiece model: %s ---> give the "
                         ".model file sentencepiece (or `ctrain prepare`) wrote", name,
                         status.ToString().c_str());
            delete tok;
            return nullptr;
        }
        return tok;
    } catch (const std::exception &e) {
        ct_error_set(err, CT_ERR_NOMEM, "cannot load tokenizer model %s: %s", name, e.what());
        return nullptr;
    }
}

extern "C" host_tokenizer *tokenizer_load(const char *model_path, ct_error *err) {
    char *bytes = nullptr;
    size_t len = 0;
    if (read_bounded(model_path, "tokenizer model", "give a sentencepiece .model file",
                     TOKENIZER_MODEL_MAX, &bytes, &len, err) != CT_OK)
        return nullptr;
    host_tokenizer *tok = tokenizer_from_bytes(bytes, len, model_path, err);
    std::free(bytes);
    return tok;
}

extern "C" void tokenizer_free(host_tokenizer *tok) { delete tok; }

extern "C" int32_t tokenizer_vocab_size(const host_tokenizer *tok) {
    return tok->sp.GetPieceSize();
}

extern "C" int32_t tokenizer_eos_id(const host_tokenizer *tok) { return tok->sp.eos_id(); }

extern "C" int32_t tokenizer_bos_id(const host_tokenizer *tok) { return tok->sp.bos_id(); }

extern "C" int32_t tokenizer_encode(const host_tokenizer *tok, const char *text, size_t len,
                                    int32_t **ids, int64_t *n, ct_error *err) {
    *ids = nullptr;
    *n = 0;
    try {
        std::vector<int32_t> all;
        std::vector<int> piece_ids;
        for (size_t pos = 0; pos < len;) {
            size_t end = pos + kChunkBytes < len ? pos + kChunkBytes : len;
            if (end < len) {  // cut after the last newline of the chunk, if it has one
                const void *nl = memrchr(text + pos, '\n', end - pos);
                if (nl) end = (size_t)((const char *)nl - text) + 1;
            }
            auto status = tok->sp.Encode(std::string(text + pos, end - pos), &piece_ids);
            if (!status.ok())
                return ct_error_set(err, CT_ERR_INVALID, "sentencepiece could not encode bytes "
                                    "%zu..%zu: %s", pos, end, status.ToString().c_str());
            all.insert(all.end(), piece_ids.begin(), piece_ids.end());
            pos = end;
        }
        *ids = static_cast<int32_t *>(std::malloc((all.size() ? all.size() : 1) *
                                                  sizeof(int32_t)));
        if (!*ids) return ct_error_set(err, CT_ERR_NOMEM, "out of memory encoding text");
        if (!all.empty()) std::memcpy(*ids, all.data(), all.size() * sizeof(int32_t));
        *n = (int64_t)all.size();
        return CT_OK;
    } catch (const std::exception &e) {
        return ct_error_set(err, CT_ERR_NOMEM, "encoding text failed: %s", e.what());
    }
}

extern "C" int32_t tokenizer_decode(const host_tokenizer *tok, const int32_t *ids, int64_t n,
                                    char **text, size_t *len, ct_error *err) {
    *text = nullptr;
    *len = 0;
    try {
        int32_t v = tok->sp.GetPieceSize();
        std::vector<int> in(ids, ids + n);
        for (int64_t i = 0; i < n; i++)
            if (in[i] < 0 || in[i] >= v)
                return ct_error_set(err, CT_ERR_INVALID, "token id %d at position %lld is "
                                    "outside the tokenizer's vocabulary 0..%d", in[i],
                                    (long long)i, v - 1);
        std::string out;
        auto status = tok->sp.Decode(in, &out);
        if (!status.ok())
            return ct_error_set(err, CT_ERR_INVALID, "sentencepiece could not decode: %s",
                                status.ToString().c_str());
        *text = static_cast<char *>(std::malloc(out.size() + 1));
        if (!*text) return ct_error_set(err, CT_ERR_NOMEM, "out of memory decoding tokens");
        std::memcpy(*text, out.data(), out.size());
        (*text)[out.size()] = '\0';
        *len = out.size();
        return CT_OK;
    } catch (const std::exception &e) {
        return ct_error_set(err, CT_ERR_NOMEM, "decoding tokens failed: %s", e.what());
    }
}
