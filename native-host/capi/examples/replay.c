/* Replays a .recap archive through the recap C API.
 *
 *   replay ARCHIVE DEVICE [--set NAME FILE]... [--get NAME FILE]... [--launches N]
 *
 * Loads ARCHIVE on DEVICE (cpu, cuda, cuda:N), lists its bindings, fills each --set binding from
 * the raw bytes of FILE, launches N times (default 1), and writes each --get binding to FILE.
 * Exits 0 on success; on any failure prints recap_last_error() and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recap.h"

static int fail(const char *what) {
    fprintf(stderr, "replay: %s: %s\n", what, recap_last_error());
    return 1;
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc(n > 0 ? (size_t)n : 1);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return data;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: replay ARCHIVE DEVICE [--set NAME FILE]... [--get NAME FILE]... [--launches N]\n");
        return 2;
    }
    RecapDevice *device = recap_device_open(argv[2]);
    if (!device) return fail("opening the device");
    RecapGraph *graph = recap_graph_load(argv[1], device);
    if (!graph) return fail("loading the archive");

    for (size_t i = 0; i < recap_graph_binding_count(graph); i++) {
        const char *name = recap_graph_binding_name(graph, i);
        size_t bytes = 0;
        if (recap_graph_binding_size(graph, name, &bytes) != RECAP_STATUS_OK) return fail(name);
        printf("binding %s: %zu bytes\n", name, bytes);
    }

    long launches = 1;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 2 < argc) {
            size_t len = 0;
            unsigned char *data = read_file(argv[i + 2], &len);
            if (!data) {
                fprintf(stderr, "replay: cannot read %s\n", argv[i + 2]);
                return 1;
            }
            RecapStatus s = recap_graph_set(graph, argv[i + 1], data, len);
            free(data);
            if (s != RECAP_STATUS_OK) return fail("setting a binding");
            i += 2;
        } else if (strcmp(argv[i], "--launches") == 0 && i + 1 < argc) {
            launches = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--get") == 0 && i + 2 < argc) {
            i += 2; /* handled after the launches */
        } else {
            fprintf(stderr, "replay: unknown argument %s\n", argv[i]);
            return 2;
        }
    }

    for (long n = 0; n < launches; n++) {
        if (recap_graph_launch(graph) != RECAP_STATUS_OK) return fail("launching");
    }
    printf("launched %ld time(s)\n", launches);

    for (int i = 3; i + 2 < argc; i++) {
        if (strcmp(argv[i], "--get") != 0) continue;
        size_t bytes = 0;
        if (recap_graph_binding_size(graph, argv[i + 1], &bytes) != RECAP_STATUS_OK) return fail("getting a binding");
        unsigned char *out = malloc(bytes > 0 ? bytes : 1);
        if (recap_graph_get(graph, argv[i + 1], out, bytes) != RECAP_STATUS_OK) return fail("getting a binding");
        FILE *f = fopen(argv[i + 2], "wb");
        if (!f || fwrite(out, 1, bytes, f) != bytes) {
            fprintf(stderr, "replay: cannot write %s\n", argv[i + 2]);
            return 1;
        }
        fclose(f);
        free(out);
        printf("wrote %s (%zu bytes) to %s\n", argv[i + 1], bytes, argv[i + 2]);
        i += 2;
    }

    recap_graph_free(graph);
    recap_device_free(device);
    return 0;
}
