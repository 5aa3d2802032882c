// Windows of several JPEGs laid out as the tiles of one JPEG, so that a decoder that pays per image decodes a
// batch's windows as a few images: nvJPEG's batched hardware decode makes about five CUDA calls an image, which
// slow the training step beside it (bench/NOTES.md). Built like a cut (jpeg_cut.h) from files with a restart marker
// after every MCU: each MCU is coded on its own (DC predictors restart, byte-aligned), so the tiles' MCUs laid in the
// mosaic's raster order behind one copy of the shared headers, with the markers renumbered and cheap filler MCUs
// where no tile lies, are a valid JPEG whose tiles hold their sources' pixels. The files must share their coding
// tables and frame layout (mosaic_key): the same quantisation tables and Huffman tables (transcode_with_restarts
// with HuffmanTables::standard writes them so).
//
// Pixels: a tile's MCUs decode as in their source (IDCT is per block). Subsampled chroma is upsampled with one
// chroma sample of context across each MCU edge, so a tile keeps a margin of one MCU (from its source) on each
// side where the window's first or last pixel lies on that edge; then every window pixel equals the source's full
// decode. Along an edge of its image that the window reaches, a row or column may differ: libjpeg repeats the
// edge's chroma there, where the mosaic has a neighbouring tile's, a filler's or the encoder's padding (at most
// 52-57 levels over real photographs, bench/results devbox run09).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/jpeg_decoder.h"

namespace trainer {

struct MosaicPiece {
  const uint8_t* data = nullptr;  // a JPEG with a restart marker after every MCU
  size_t size = 0;
  Rect window;                    // full-resolution pixels of the source, clipped to it
  const std::string* key = nullptr;  // its mosaic_key where the caller has it (then not read again)
};

struct MosaicTile {
  Rect at;         // the tile in its source's pixels: whole MCUs (the last column or row may pass the image's edge)
  int x = 0, y = 0;  // where the tile's origin lies in the mosaic
  Rect window;     // the piece's window in the mosaic's pixels
};

struct JpegMosaic {
  std::vector<uint8_t> bytes;     // the mosaic JPEG
  int width = 0, height = 0;      // its frame: whole MCUs
  std::vector<MosaicTile> tiles;  // one per piece, in the pieces' order
  int64_t tile_mcus = 0, filler_mcus = 0;  // MCUs taken from the pieces, and fillers
};

// What files must share to go into one mosaic: their header segments up to the scan (quantisation and Huffman
// tables, frame components and sampling, restart interval, scan header) without APPn / COM segments and without
// the frame's size. Empty where the file cannot be tiled (not baseline or extended sequential Huffman, or not one
// scan of every component with a restart interval of one MCU).
std::string mosaic_key(const uint8_t* data, size_t size);

// Lays the pieces' windows out in shelves (tallest first, at the width that leaves the fewest fillers) as one JPEG in
// `out`. False, with `out` unspecified, where
// a piece cannot be tiled (its key is empty or differs from the first piece's, or its markers are not where they
// must be within the tile's span: the caller decodes it on its own, which reports any corruption).
bool build_jpeg_mosaic(const std::vector<MosaicPiece>& pieces, JpegMosaic& out);

}  // namespace trainer
