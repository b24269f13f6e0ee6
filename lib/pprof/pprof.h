/*
 * pprof's profile.proto: encode a struct profile (protobuf-c), gzip it, and
 * read one back (cprof's own or any other pprof file, gzipped or not). What is
 * read is untrusted: ids and string indexes are checked, never trusted.
 */
#ifndef CPROF_PPROF_H
#define CPROF_PPROF_H

#include <stddef.h>
#include <stdint.h>

#include "profile/profile.h"

/* Serializes @p as an uncompressed profile.proto message into a malloc'd buffer. */
int pprof_encode(const struct profile *p, uint8_t **ret_buf, size_t *ret_len);

/* gzip (RFC 1952) @len bytes of @in into a malloc'd buffer. */
int pprof_gzip(const uint8_t *in, size_t len, uint8_t **ret_buf, size_t *ret_len);

/* pprof_encode() then pprof_gzip(): the bytes of a .pb.gz file. */
int pprof_encode_gzip(const struct profile *p, uint8_t **ret_buf, size_t *ret_len);

/*
 * Decodes a pprof file's bytes (gzip detected by its magic, members may be
 * concatenated) into a new profile, renumbering ids in the order they appear.
 * Returns -EBADMSG for anything malformed (corrupt gzip, bad protobuf, an
 * index or id out of range, a zero or repeated id, string_table[0] not ""),
 * -EFBIG if it inflates past 1 GiB, -ENOMEM. keep_frames and Location's
 * is_folded have no place in struct profile and are dropped; samples with
 * the same stack and labels are merged.
 */
int pprof_decode(const uint8_t *buf, size_t len, struct profile **ret);

#endif
