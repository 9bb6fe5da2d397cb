/* What decoding only a crop box could save, measured with libjpeg-turbo's own API.
 *
 * No Python binding exposes libjpeg-turbo's partial decoding, so this measures its limit
 * directly: CPU time per image (one core) of
 *   full       the whole image to RGB (what Pillow and simplejpeg do at scale 1/1)
 *   huffman    jpeg_read_coefficients: the entropy decoding alone, no IDCT, no colour
 *   roi        rows above the box skipped (jpeg_skip_scanlines), columns outside it cut
 *              (jpeg_crop_scanline), decoding stopped after the box's last row
 *   stop-early all columns, decoding stopped after the box's last row
 * for boxes read from stdin ("top left height width" per line, e.g. RandomResizedCrop's),
 * applied to the files given in turn. Build and run (benchmarks/s3_imagenet.py's data):
 *
 *   gcc -O2 -o /tmp/jpeg_roi_limit benchmarks/jpeg_roi_limit.c -ljpeg
 *   python -c "import torch; from conveyor.vision import random_resized_crop_box as box; \
 *     g = torch.Generator().manual_seed(0); [print(*box(375, 500, generator=g)) for _ in range(3000)]" \
 *     | /tmp/jpeg_roi_limit /tmp/conveyor-bench-data/s3_imagenet/files/[0-9]*.jpg
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <jpeglib.h>

enum mode { FULL, HUFFMAN, ROI, STOP_EARLY };

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static unsigned char *read_file(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc(*size);
    if (fread(data, 1, *size, f) != (size_t)*size) { perror(path); exit(1); }
    fclose(f);
    return data;
}

static unsigned char row_buffer[16384 * 3];

static void decode(const unsigned char *data, long size, enum mode mode, const int *box) {
    struct jpeg_decompress_struct info;
    struct jpeg_error_mgr errors;
    JSAMPROW row = row_buffer;
    info.err = jpeg_std_error(&errors);
    jpeg_create_decompress(&info);
    jpeg_mem_src(&info, data, size);
    jpeg_read_header(&info, TRUE);
    if (mode == HUFFMAN) {
        jpeg_read_coefficients(&info);
        jpeg_destroy_decompress(&info);
        return;
    }
    info.out_color_space = JCS_RGB;
    jpeg_start_decompress(&info);
    JDIMENSION bottom = info.output_height;
    if (mode != FULL) {
        JDIMENSION left = box[1], width = box[3];
        bottom = box[0] + box[2];
        if (mode == ROI) {
            jpeg_crop_scanline(&info, &left, &width);
            if (box[0] > 0) jpeg_skip_scanlines(&info, box[0]);
        }
    }
    while (info.output_scanline < bottom) jpeg_read_scanlines(&info, &row, 1);
    jpeg_abort_decompress(&info);
    jpeg_destroy_decompress(&info);
}

int main(int argc, char **argv) {
    int files = argc - 1, count = 0, capacity = 1024;
    if (files < 1) { fprintf(stderr, "usage: %s FILE.jpg... < boxes\n", argv[0]); return 2; }
    long *sizes = malloc(sizeof(long) * files);
    unsigned char **data = malloc(sizeof(unsigned char *) * files);
    for (int i = 0; i < files; i++) data[i] = read_file(argv[i + 1], &sizes[i]);
    int (*boxes)[4] = malloc(sizeof(int[4]) * capacity);
    while (scanf("%d %d %d %d", &boxes[count][0], &boxes[count][1], &boxes[count][2],
                 &boxes[count][3]) == 4) {
        if (++count == capacity) boxes = realloc(boxes, sizeof(int[4]) * (capacity *= 2));
    }
    if (count == 0) { fprintf(stderr, "no boxes on stdin\n"); return 2; }
    const char *names[] = {"full", "huffman", "roi", "stop-early"};
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int rep = 0; rep < 5; rep++) {
        for (int mode = FULL; mode <= STOP_EARLY; mode++) {
            double start = cpu_s();
            for (int k = 0; k < count; k++)
                decode(data[k % files], sizes[k % files], mode, boxes[k]);
            double ms = (cpu_s() - start) / count * 1e3;
            if (ms < best[mode]) best[mode] = ms;
        }
    }
    for (int mode = FULL; mode <= STOP_EARLY; mode++)
        printf("%-10s %.3f ms/image (best of 5 passes over %d boxes)\n", names[mode], best[mode],
               count);
    return 0;
}
