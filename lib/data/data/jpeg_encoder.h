// JPEG writing for `trainer pack` and tests: re-encoding decoded pixels, and the lossless rewrite that gives a
// file restart markers for crop decoding (jpeg_cut.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/jpeg_decoder.h"

namespace trainer {

// The Huffman tables a JPEG is written with: fitted to each image (smallest files), or the JPEG standard's example tables
// (Annex K) for every image, about 5% larger, so that files of equal quantisation tables share all their coding
// tables and can be tiled into one mosaic (jpeg_mosaic.h).
enum class HuffmanTables { fitted, standard };

// Baseline JPEG at `quality` (1-100) of an RGB image (trainer pack's re-encoding), a restart marker after every
// `restart_mcus` MCUs (0: none). `name` labels errors.
void encode_jpeg(const RgbImage& img, int quality, std::vector<uint8_t>& out, const std::string& name,
                 int restart_mcus = 0, HuffmanTables tables = HuffmanTables::fitted);

// Lossless rewrite of a JPEG (trainer pack): the same DCT coefficients, hence the same pixels, written sequential
// (a progressive file becomes baseline) with a restart marker after every MCU, so that crop decoding can cut its
// window out (jpeg_cut.h). APPn and COM markers (EXIF, ICC) are kept. Returns false, leaving `out` alone, for
// CMYK/YCCK files (kept as they are); throws Error naming `name` for a file libjpeg cannot read whole (corrupt or
// truncated data).
// restart_mcus: MCUs per restart interval (jpeg_cut.h cuts where it divides the MCU row or is whole rows).
bool transcode_with_restarts(const uint8_t* data, size_t size, std::vector<uint8_t>& out, const std::string& name,
                             int restart_mcus = 1, HuffmanTables tables = HuffmanTables::fitted);

}  // namespace trainer
