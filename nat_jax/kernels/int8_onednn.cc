// int8 matrix products for XLA:CPU through oneDNN: weights packed once into oneDNN's own blocked layout,
// activations int8 per call, int32 accumulators (exact). Loaded by nat_jax/kernels/onednn.py with ctypes
// after libdnnl.so.3 (the onednn-cpu-gomp wheel) is loaded RTLD_GLOBAL: this library carries no link to it.
//
//   nat_int8_packed_bytes(k, n)            bytes of a packed [k, n] int8 weight (-1: no kernel for it)
//   nat_int8_pack(w, k, n, transposed, o)  w int8 [k, n] row-major ([n, k] when transposed) -> o
//   NatInt8Matmul                          XLA FFI handler: x s8[m, k], packed u8[bytes] -> s32[m, n]
//
// oneDNN packs a weight for a given row count m, but into the same layout for every m (a primitive left with m
// unknown until run time packs nothing): so one packed copy serves every batch size, and a primitive is kept
// per (m, k, n, threads).
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

extern "C" void omp_set_num_threads(int);  // libgomp, loaded with libdnnl (GNU OpenMP build)

#define NAT_EXPORT extern "C" __attribute__((visibility("default")))

namespace ffi = xla::ffi;
using dnnl::memory;

namespace {

using dt = memory::data_type;

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The layout oneDNN's int8 matmul (brgemm on VNNI CPUs) wants its [k, n] weights in: the same for every
// row count (checked by ProductFor), with the s8 source's compensation term stored after the blocks.
memory::desc PackedDesc(int64_t k, int64_t n) {
  memory::desc src({1, k}, dt::s8, memory::format_tag::ab);
  memory::desc wei({k, n}, dt::s8, memory::format_tag::any);
  memory::desc dst({1, n}, dt::s32, memory::format_tag::ab);
  return dnnl::matmul::primitive_desc(Engine(), src, wei, dst).weights_desc();
}

struct Product {
  dnnl::matmul prim;
  memory::desc scratchpad;  // the working memory one execution needs: the caller's own (see ProductFor)
};

// The primitive for [m, k] x packed [k, n] on `threads` OpenMP threads (oneDNN splits the work when it creates
// a primitive, for the calling thread's OpenMP thread count): created once per shape and count, kept (a jitted
// program has few). XLA runs independent products of one shape at once from several threads, so a primitive
// keeps no working memory of its own (scratchpad_mode::user): each call brings its thread's.
const Product& ProductFor(int64_t m, int64_t k, int64_t n, int threads, const memory::desc& packed) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int>, std::unique_ptr<Product>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{m, k, n, threads}];
  if (!slot) {
    memory::desc src({m, k}, dt::s8, memory::format_tag::ab);
    memory::desc dst({m, n}, dt::s32, memory::format_tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(Engine(), src, packed, dst, attr);
    slot.reset(new Product{dnnl::matmul(pd), pd.scratchpad_desc()});
  }
  return *slot;
}

}  // namespace

NAT_EXPORT int64_t nat_int8_packed_bytes(int64_t k, int64_t n) {
  try {
    return static_cast<int64_t>(PackedDesc(k, n).get_size());
  } catch (const dnnl::error&) {
    return -1;
  }
}

NAT_EXPORT int nat_int8_pack(const int8_t* w, int64_t k, int64_t n, int transposed, uint8_t* out) {
  try {
    omp_set_num_threads(1);
    memory::desc plain({k, n}, dt::s8, transposed ? memory::dims{1, k} : memory::dims{n, 1});
    memory from(plain, Engine(), const_cast<int8_t*>(w));
    memory to(PackedDesc(k, n), Engine(), out);
    dnnl::stream stream(Engine());
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    return 0;
  } catch (const dnnl::error&) {
    return 1;
  }
}

static ffi::Error Int8Matmul(ffi::Buffer<ffi::S8> x, ffi::Buffer<ffi::U8> packed, ffi::ResultBuffer<ffi::S32> out,
                             int64_t threads) {
  auto dims = x.dimensions();
  if (dims.size() != 2) return ffi::Error::InvalidArgument("nat_int8_matmul: x must be [m, k]");
  const int64_t m = dims[0], k = dims[1], n = out->dimensions()[1];
  if (m == 0) return ffi::Error::Success();
  try {
    thread_local std::map<std::pair<int64_t, int64_t>, memory::desc> layouts;  // PackedDesc is not free
    auto found = layouts.find({k, n});
    if (found == layouts.end()) found = layouts.emplace(std::make_pair(k, n), PackedDesc(k, n)).first;
    const memory::desc& layout = found->second;
    if (packed.element_count() != layout.get_size())
      return ffi::Error::InvalidArgument("nat_int8_matmul: the packed weight's size does not match [k, n]");
    omp_set_num_threads(static_cast<int>(threads));  // for this calling thread; before the primitive is made
    memory src(memory::desc({m, k}, dt::s8, memory::format_tag::ab), Engine(), x.typed_data());
    memory wei(layout, Engine(), packed.typed_data());
    memory dst(memory::desc({m, n}, dt::s32, memory::format_tag::ab), Engine(), out->typed_data());
    thread_local dnnl::stream stream(Engine());
    const Product& product = ProductFor(m, k, n, static_cast<int>(threads), layout);
    thread_local std::vector<uint8_t> scratch;  // this calling thread's working memory, grown as needed
    if (scratch.size() < product.scratchpad.get_size()) scratch.resize(product.scratchpad.get_size());
    memory pad(product.scratchpad, Engine(), scratch.data());
    product.prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst},
                                  {DNNL_ARG_SCRATCHPAD, pad}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return ffi::Error::Internal(std::string("nat_int8_matmul: oneDNN: ") + e.what());
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(NatInt8Matmul, Int8Matmul,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("threads"));
