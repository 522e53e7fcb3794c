/*
 * The choices of every ENUM variable of common/params.def, one list each:
 * X(prefix, NAME, "name") in the order of the stored index. The same list
 * gives the parser its names (ZC_CHOICE_STRING) and the code its constants
 * (ZC_CFG_<VARIABLE>_<NAME>), so that a value is never retyped as a number
 * or a string. Where a choice stands for a C enum of another header, the
 * code that converts it asserts at compile time that the two agree.
 */
#ifndef ZC_COMMON_CHOICES_H
#define ZC_COMMON_CHOICES_H

// clang-format off
#define ZC_CHOICES_LOG_LEVEL(X, p) \
    X(p, ERROR, "error") X(p, WARN, "warn") X(p, INFO, "info") X(p, DEBUG, "debug") \
    X(p, TRACE, "trace")
#define ZC_CHOICES_CPU(X, p) \
    X(p, AUTO, "auto") X(p, SCALAR, "scalar") X(p, AVX2, "avx2") X(p, AVX512, "avx512")
#define ZC_CHOICES_QSGD_SCALE(X, p) X(p, MAX, "max") X(p, L2, "l2")
#define ZC_CHOICES_QSGD_CODING(X, p) X(p, FIXED, "fixed") X(p, ELIAS, "elias") X(p, AUTO, "auto")
#define ZC_CHOICES_TOPK_VALUES(X, p) X(p, F32, "f32") X(p, F16, "f16")
/* zc_codec_id_t in order, then auto */
#define ZC_CHOICES_CODEC(X, p) \
    X(p, NONE, "none") X(p, QSGD, "qsgd") X(p, FP16, "fp16") X(p, BF16, "bf16") \
    X(p, TOPK, "topk") X(p, GRADIVEQ, "gradiveq") X(p, QSGD_INT, "qsgd-int") \
    X(p, POWERSGD, "powersgd") X(p, AUTO, "auto")
/* the compressed algorithms a user can ask for: collectives/algo.h maps them */
#define ZC_CHOICES_ALGO(X, p) \
    X(p, AUTO, "auto") X(p, RING, "ring") X(p, ALLGATHER, "allgather") X(p, SCATTER, "scatter")
/* how a communicator uses the hosts its ranks share (collectives/hier.c) */
#define ZC_CHOICES_TOPOLOGY(X, p) \
    X(p, AUTO, "auto") X(p, FLAT, "flat") X(p, HIERARCHICAL, "hierarchical") \
    X(p, SHARDS, "shards") X(p, LEADER, "leader")
/* the stateless codecs, with zc_codec_id_t's values */
#define ZC_CHOICES_COLLNET_CODEC(X, p) \
    X(p, NONE, "none") X(p, QSGD, "qsgd") X(p, FP16, "fp16") X(p, BF16, "bf16")
// clang-format on

/* "a,b,c," for the parser, which ignores the trailing comma */
#define ZC_CHOICE_STRING_ITEM(p, id, name) name ","
#define ZC_CHOICE_STRING(list) list(ZC_CHOICE_STRING_ITEM, _)
#define ZC_CHOICE_ENUMERATOR(p, id, name) p##_##id,
#define ZC_CHOICE_NAME_ITEM(p, id, name) name,
/* An initializer of the names: static const char *const n[] = {ZC_CHOICE_NAMES(...)}; */
#define ZC_CHOICE_NAMES(list) list(ZC_CHOICE_NAME_ITEM, _)

enum zc_cfg_log_level { ZC_CHOICES_LOG_LEVEL(ZC_CHOICE_ENUMERATOR, ZC_CFG_LOG_LEVEL) };
enum zc_cfg_cpu { ZC_CHOICES_CPU(ZC_CHOICE_ENUMERATOR, ZC_CFG_CPU) };
enum zc_cfg_qsgd_scale { ZC_CHOICES_QSGD_SCALE(ZC_CHOICE_ENUMERATOR, ZC_CFG_QSGD_SCALE) };
enum zc_cfg_qsgd_coding { ZC_CHOICES_QSGD_CODING(ZC_CHOICE_ENUMERATOR, ZC_CFG_QSGD_CODING) };
enum zc_cfg_topk_values { ZC_CHOICES_TOPK_VALUES(ZC_CHOICE_ENUMERATOR, ZC_CFG_TOPK_VALUES) };
enum zc_cfg_codec { ZC_CHOICES_CODEC(ZC_CHOICE_ENUMERATOR, ZC_CFG_CODEC) };
enum zc_cfg_algo { ZC_CHOICES_ALGO(ZC_CHOICE_ENUMERATOR, ZC_CFG_ALGO) ZC_CFG_ALGO_COUNT };
enum zc_cfg_topology { ZC_CHOICES_TOPOLOGY(ZC_CHOICE_ENUMERATOR, ZC_CFG_TOPOLOGY) };
enum zc_cfg_collnet_codec { ZC_CHOICES_COLLNET_CODEC(ZC_CHOICE_ENUMERATOR, ZC_CFG_COLLNET_CODEC) };

#endif
