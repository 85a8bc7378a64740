/* pack.c — `ragtag pack`: a data set into shards that training reads
 * from disk (shards:DIR), and `ragtag pack --verify DIR` that reads every
 * byte of them back (docs/shards.md). */
#include "config.h"

#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "data.h"
#include "shards.h"
#include "status.h"

static const char pack_help[] =
    "usage: ragtag pack --data SPEC -o DIR [--shards N] [--limit N]\n"
    "       ragtag pack --verify DIR\n"
    "\n"
    "Writes a data set as shards: fixed-size byte records with a CRC-32 each,\n"
    "an index with each shard's count and CRC-32 and the set's statistics.\n"
    "Train with --data shards:DIR: records are read from disk as batches need\n"
    "them, so the set may be larger than memory. --verify reads every shard\n"
    "and checks every checksum. See docs/shards.md.\n"
    "\n"
    "  --data SPEC   what to pack (fashion-mnist, mnist:DIR, cifar10:DIR, csv:...)\n"
    "  -o DIR        the shard directory (created; an old index in it is removed first)\n"
    "  --shards N    shards of the training set (default 8); the test set gets\n"
    "                as many as its share of the records, at least one\n"
    "  --limit N     only the first N training images\n";

struct pack_args {
    const char *data, *out, *verify;
    long shards, limit;
};

static int parse(int argc, char **argv, struct pack_args *a)
{
    *a = (struct pack_args){.shards = 8};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!v)
            return rt_error(RT_ERR_CONFIG, "%s needs a value", k);
        if (!strcmp(k, "--data"))
            a->data = v;
        else if (!strcmp(k, "-o") || !strcmp(k, "--out"))
            a->out = v;
        else if (!strcmp(k, "--verify"))
            a->verify = v;
        else if (!strcmp(k, "--shards") || !strcmp(k, "--limit")) {
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < (k[2] == 's' ? 1 : 0) || n > (k[2] == 's' ? RT_SHARDS_MAX : 1L << 31))
                return rt_error(RT_ERR_CONFIG, "%s %s: expected a whole number%s", k, v,
                                k[2] == 's' ? " from 1 to 4096" : " of 0 or more");
            *(k[2] == 's' ? &a->shards : &a->limit) = n;
        } else
            return rt_error(RT_ERR_CONFIG, "unknown flag '%s'", k);
        i++;
    }
    if (a->verify ? a->data || a->out : !a->data || !a->out)
        return rt_error(RT_ERR_CONFIG, "expected --data SPEC -o DIR, or --verify DIR alone");
    return RT_OK;
}

static int write_set(rt_shards_writer *wr, const rt_dataset *ds, const char *set, long shards)
{
    RT_TRY(rt_shards_writer_set(wr, set, ds->n, (int)shards));
    size_t per = rt_dataset_sample_values(ds);
    for (long i = 0; i < ds->n; i++)
        RT_TRY(rt_shards_writer_add(wr, ds->u8 + (size_t)i * per, ds->y[i]));
    return RT_OK;
}

static int pack(const struct pack_args *a)
{
    struct rt_data d;
    double t0 = rt_now();
    RT_TRY(rt_data_open(a->data, 0.0f, a->limit, 1, &d));
    rt_dataset *tr = d.train, *te = d.test;
    int rc = RT_OK;
    if (!tr->u8 || (te && !te->u8))
        rc = rt_error(RT_ERR_FORMAT, "%s holds values that are not bytes (0..255): shards "
                                     "store bytes", a->data);
    rt_shards_writer *wr = NULL;
    if (rc == RT_OK && !(wr = rt_shards_writer_new(a->out, tr->c, tr->h, tr->w, tr->classes)))
        rc = RT_ERR_IO;
    long test_shards = 0;
    if (rc == RT_OK && te) {
        test_shards = (long)((double)a->shards * te->n / tr->n + 0.5);
        test_shards = test_shards < 1 ? 1 : test_shards;
    }
    if (rc == RT_OK)
        rc = write_set(wr, tr, "train", a->shards);
    if (rc == RT_OK && te)
        rc = write_set(wr, te, "test", test_shards);
    if (rc == RT_OK)
        rc = rt_shards_writer_finish(wr, d.mean, d.std);
    rt_shards_writer_destroy(&wr);
    if (rc == RT_OK) {
        double mb = ((double)tr->n + (te ? te->n : 0)) * (rt_dataset_sample_values(tr) + 8) / 1e6;
        char test[64] = "";
        if (te)
            snprintf(test, sizeof test, ", %d test records in %ld", te->n, test_shards);
        printf("packed %s: %d train records in %ld shards%s, of %dx%dx%d, %.1f MB, into %s "
               "in %.1f s\n", a->data, tr->n, tr->n < a->shards ? (long)tr->n : a->shards, test,
               tr->c, tr->h, tr->w, mb, a->out, rt_now() - t0);
    }
    rt_data_close(&d);
    return rc;
}

static int verify(const char *dir)
{
    static const char *const sets[] = {"train", "test"};
    double t0 = rt_now();
    uint64_t total = 0;
    for (int i = 0; i < 2; i++) {
        rt_shards *s = NULL;
        RT_TRY(rt_shards_open(dir, sets[i], &s));
        if (!s)
            continue;
        uint64_t bytes = 0;
        int rc = rt_shards_verify(s, &bytes);
        const struct rt_shards_info *in = rt_shards_info(s);
        if (rc == RT_OK)
            printf("%s: set %s: %ld records in %d shards, every checksum right\n", dir, sets[i],
                   in->n, in->nshards);
        rt_shards_close(&s);
        RT_TRY(rc);
        total += bytes;
    }
    double secs = rt_now() - t0;
    printf("%s: verified %.1f MB in %.2f s (%.0f MB/s)\n", dir, (double)total / 1e6, secs,
           (double)total / 1e6 / (secs > 1e-9 ? secs : 1e-9));
    return RT_OK;
}

int rt_cli_pack(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(pack_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    struct pack_args a;
    int rc = parse(argc, argv, &a);
    if (rc < 0) {
        fprintf(stderr, "ragtag pack: %s (see 'ragtag pack --help')\n", rt_error_detail());
        return 2;
    }
    rc = a.verify ? verify(a.verify) : pack(&a);
    if (rc < 0) {
        fprintf(stderr, "ragtag: %s\n", rt_error_detail()[0] ? rt_error_detail() : rt_strerror(rc));
        return 1;
    }
    return 0;
}
