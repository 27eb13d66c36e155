// torch/include/ATen/ATen.h of torch 2.14.1 (cp311 manylinux x86_64 wheel), trimmed to its C++ standard check
#if !defined(_MSC_VER) && __cplusplus < 202002L
#error C++20 or later compatible compiler is required to use ATen.
#endif
