// The source of saturate_test_pch, the target that builds the tests' precompiled header
// (CMakeLists.txt). It has no tests of its own.
