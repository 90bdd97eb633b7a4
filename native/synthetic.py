"""Kernel that formats generated ads samples as text lines (see ``ingest.synthetic``)."""

import numpy as np

from .bundles import bundle
from .jit import kernel

# One row per page view (indexed by a sample's group): the user's features, repeated on each of its lines.
Users = bundle(
    "Users",
    uid="i8[:]",
    age="i8[:]",
    gender="i8[:]",
    clk_keys="i8[:, :]",
    clk_cnt="i8[:, :]",
    pref_keys="i8[:, :]",
    pref_w="i8[:, :]",
    user_emb="i8[:, :]",
)
# One row per sample (an ad shown): its group, place in the group and timestamp, the ad's features, the labels.
Ads = bundle(
    "Ads",
    group="i8[:]",
    pos_in_group="i8[:]",
    ts="i8[:]",
    item="i8[:]",
    cate="i8[:]",
    shop="i8[:]",
    brand="i8[:]",
    title="i8[:, :]",
    tags="i8[:, :]",
    tag_w="i8[:, :]",
    ad_ctx="i8[:, :]",
    clk="i8[:]",
    conv="i8[:]",
)


@kernel
def _put(out, pos, src):
    for k in range(len(src)):
        out[pos + k] = src[k]
    return pos + len(src)


@kernel
def _put_int(out, pos, v):
    if v < 0:
        out[pos] = 45
        pos += 1
        v = -v
    n = 1
    rest = v // 10
    while rest:
        n += 1
        rest //= 10
    for k in range(n - 1, -1, -1):
        out[pos + k] = 48 + v % 10
        v //= 10
    return pos + n


@kernel
def _put_fixed4(out, pos, v):
    """Write ``v / 10000`` with exactly four decimals (``v`` an integer)."""
    if v < 0:
        out[pos] = 45
        pos += 1
        v = -v
    pos = _put_int(out, pos, v // 10000)
    out[pos] = 46
    frac = v % 10000
    for k in range(4):
        out[pos + 4 - k] = 48 + frac % 10
        frac //= 10
    return pos + 5


@kernel
def _put_list(out, pos, name, keys, vals, scale4):
    """``name@k[:v],...``; vals None-like (length 0) writes bare keys; scale4 writes v/10000."""
    pos = _put(out, pos, name)
    out[pos] = 64
    pos += 1
    for j in range(len(keys)):
        if j:
            out[pos] = 44
            pos += 1
        pos = _put_int(out, pos, keys[j])
        if len(vals):
            out[pos] = 58
            pos += 1
            if scale4:
                pos = _put_fixed4(out, pos, vals[j])
            else:
                pos = _put_int(out, pos, vals[j])
    return pos


@kernel
def _put_dense(out, pos, name, vals):
    pos = _put(out, pos, name)
    out[pos] = 64
    pos += 1
    for j in range(len(vals)):
        if j:
            out[pos] = 44
            pos += 1
        pos = _put_fixed4(out, pos, vals[j])
    return pos


@kernel
def format_ads_lines(out, names, name_off, group_base, users, ads):
    """Write one text line per sample into ``out``; returns the bytes written.

    ``users`` rows are indexed by ``group[i]``, ``ads`` rows by ``i``; group ids
    are written as ``group_base + group[i]``.  Names are
    ``names[name_off[j]:name_off[j+1]]`` in the order uid, age, gender, clk_hist,
    cate_pref, item, cate, shop, brand, title, tags, user_emb, ad_ctx.
    """
    uid, age, gender, clk_keys, clk_cnt, pref_keys, pref_w, user_emb = users
    group, pos_in_group, ts, item, cate, shop, brand, title, tags, tag_w, ad_ctx, clk, conv = ads
    none = np.empty(0, np.int64)
    pos = 0
    for i in range(len(group)):
        g = group[i]
        # sample id pv<g>_<i> and group id pv<g>
        out[pos] = 112
        out[pos + 1] = 118
        pos = _put_int(out, pos + 2, group_base + g)
        out[pos] = 95
        pos = _put_int(out, pos + 1, pos_in_group[i])
        out[pos] = 124
        out[pos + 1] = 112
        out[pos + 2] = 118
        pos = _put_int(out, pos + 3, group_base + g)
        out[pos] = 124
        pos += 1
        singles_g = (uid[g], age[g], gender[g])
        for j in range(3):
            pos = _put(out, pos, names[name_off[j] : name_off[j + 1]])
            out[pos] = 64
            pos = _put_int(out, pos + 1, singles_g[j])
            out[pos] = 59
            pos += 1
        pos = _put_list(out, pos, names[name_off[3] : name_off[4]], clk_keys[g], clk_cnt[g], False)
        out[pos] = 59
        pos = _put_list(out, pos + 1, names[name_off[4] : name_off[5]], pref_keys[g], pref_w[g], True)
        singles_s = (item[i], cate[i], shop[i], brand[i])
        for j in range(4):
            out[pos] = 59
            pos = _put(out, pos + 1, names[name_off[5 + j] : name_off[6 + j]])
            out[pos] = 64
            pos = _put_int(out, pos + 1, singles_s[j])
        out[pos] = 59
        pos = _put_list(out, pos + 1, names[name_off[9] : name_off[10]], title[i], none, False)
        out[pos] = 59
        pos = _put_list(out, pos + 1, names[name_off[10] : name_off[11]], tags[i], tag_w[i], True)
        out[pos] = 124
        pos = _put_dense(out, pos + 1, names[name_off[11] : name_off[12]], user_emb[g])
        out[pos] = 59
        pos = _put_dense(out, pos + 1, names[name_off[12] : name_off[13]], ad_ctx[i])
        out[pos] = 124
        pos = _put_int(out, pos + 1, clk[i])
        out[pos] = 46
        out[pos + 1] = 48
        out[pos + 2] = 44
        pos = _put_int(out, pos + 3, conv[i])
        out[pos] = 46
        out[pos + 1] = 48
        out[pos + 2] = 124
        pos = _put_int(out, pos + 3, ts[i])
        out[pos] = 10
        pos += 1
    return pos
