// The one source of saturate_test_pch and saturate_lib_pch, the targets that build the
// precompiled headers of the tests and of the libraries (CMakeLists.txt, src/CMakeLists.txt).
