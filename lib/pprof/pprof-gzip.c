#define ZLIB_CONST
#include "pprof/pprof.h"
#include "util/util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include "pprof/pprof-private.h"

/* zlib counts bytes in uInt: feed and drain it at most this much at a time. */
#define ZLIB_CHUNK ((size_t)UINT_MAX)

/* Doubles *@buf up to @max bytes; -EFBIG when it is already that big. */
static int grow_output(uint8_t **buf, size_t *cap, size_t max)
{
	size_t n;
	uint8_t *b;

	if (*cap >= max)
		return -EFBIG;
	n = *cap > max / 2 ? max : *cap * 2;
	b = realloc(*buf, n);
	if (!b)
		return -ENOMEM;
	*buf = b;
	*cap = n;
	return 0;
}

int pprof_gzip(const uint8_t *in, size_t len, uint8_t **ret_buf, size_t *ret_len)
{
	z_stream zs = { 0 };
	size_t cap, used = 0, left = len;
	uint8_t *out;
	int zr, r;

	if ((!in && len) || !ret_buf || !ret_len)
		return -EINVAL;
	/* 15 + 16: a 32 KiB window with a gzip header and trailer, not zlib's.
	 * The fastest level, as Go's profiles (runtime/pprof's
	 * newProfileBuilder: gzip.BestSpeed): cprof runs on a host in trouble. */
	zr = deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
	if (zr != Z_OK)
		return zr == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
	/* Enough for one pass in the usual case; grown below if not. */
	cap = deflateBound(&zs, len);
	out = malloc(cap);
	if (!out) {
		r = -ENOMEM;
		goto out_end_stream;
	}
	zs.next_in = in;
	do {
		size_t avail;

		if (!zs.avail_in && left) {
			zs.avail_in = MIN(left, ZLIB_CHUNK);
			left -= zs.avail_in;
		}
		if (used == cap) {
			r = grow_output(&out, &cap, SIZE_MAX);
			if (r < 0)
				goto out_free_output;
		}
		zs.next_out = out + used;
		zs.avail_out = avail = MIN(cap - used, ZLIB_CHUNK);
		zr = deflate(&zs, left || zs.avail_in ? Z_NO_FLUSH : Z_FINISH);
		used += avail - zs.avail_out;
		/* Z_BUF_ERROR only means no progress was possible: more room comes. */
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
			r = -EIO;
			goto out_free_output;
		}
	} while (zr != Z_STREAM_END);

	deflateEnd(&zs);
	*ret_buf = out;
	*ret_len = used;
	return 0;

out_free_output:
	free(out);
out_end_stream:
	deflateEnd(&zs);
	return r;
}

/* After a gzip member ends, what follows must be nothing or another member. */
static int next_member(z_stream *zs)
{
	if (zs->avail_in < 2 || zs->next_in[0] != 0x1f || zs->next_in[1] != 0x8b)
		return -EBADMSG;
	return inflateReset(zs) == Z_OK ? 0 : -EBADMSG;
}

int pprof_gunzip(const uint8_t *in, size_t len, size_t max, uint8_t **ret_buf,
		 size_t *ret_len)
{
	z_stream zs = { 0 };
	size_t cap, used = 0;
	uint8_t *out;
	int zr, r;

	/* One pass of input keeps member boundaries simple; 4 GiB of gzip
	 * could not inflate to less than @max anyway. */
	if (len > ZLIB_CHUNK)
		return -EFBIG;
	if (inflateInit2(&zs, 15 + 16) != Z_OK)
		return -ENOMEM;
	/* One byte past @max tells "exactly max" from "more than max". */
	if (max == SIZE_MAX)
		max--;
	max++;
	cap = MIN(max, MAX(len * 4, (size_t)4096));
	out = malloc(cap);
	if (!out) {
		r = -ENOMEM;
		goto out_end_stream;
	}
	zs.next_in = in;
	zs.avail_in = len;
	for (;;) {
		size_t avail;

		if (used == cap) {
			r = grow_output(&out, &cap, max);
			if (r < 0)
				goto out_free_output;
		}
		zs.next_out = out + used;
		zs.avail_out = avail = MIN(cap - used, ZLIB_CHUNK);
		zr = inflate(&zs, Z_NO_FLUSH);
		used += avail - zs.avail_out;
		if (zr == Z_STREAM_END) {
			if (!zs.avail_in)
				break;
			r = next_member(&zs);
			if (r < 0)
				goto out_free_output;
		} else if (zr == Z_OK || (zr == Z_BUF_ERROR && !zs.avail_out)) {
			continue;
		} else if (zr == Z_MEM_ERROR) {
			r = -ENOMEM;
			goto out_free_output;
		} else {
			/* Z_BUF_ERROR with room left: the input ended early. */
			r = -EBADMSG;
			goto out_free_output;
		}
	}
	if (used == max) {
		r = -EFBIG;
		goto out_free_output;
	}

	inflateEnd(&zs);
	*ret_buf = out;
	*ret_len = used;
	return 0;

out_free_output:
	free(out);
out_end_stream:
	inflateEnd(&zs);
	return r;
}

int pprof_encode_gzip(const struct profile *p, uint8_t **ret_buf, size_t *ret_len)
{
	uint8_t *raw;
	size_t rawlen;
	int r;

	r = pprof_encode(p, &raw, &rawlen);
	if (r < 0)
		return r;
	r = pprof_gzip(raw, rawlen, ret_buf, ret_len);
	free(raw);
	return r;
}
