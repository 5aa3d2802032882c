// Anchor for the shared precompiled torch header (see lib/CMakeLists.txt).
