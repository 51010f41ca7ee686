// Does anything done once in a context change how fast every later graph kernel node launches?
// Times the 1000-node chain of `inc` (the floor's chain, as recap builds it: driver API, explicit
// kernel nodes), then performs each step named on the command line, in order, timing the chain
// again after each: a new graph on a new buffer, one on the first buffer, and the graph
// instantiated at the start. Steps:
//   cond, condp, condlib, condunload, one   load recap's condition kernel (module, sm_90 module,
//                                           library, loaded then unloaded) or a kernel calling
//                                           cudaGraphSetConditional itself
//   fill, sample                            load recap's fill kernels / sample kernels as libraries
//   stream                                  1000 launches of `inc` on the first stream
//   alloc, stack, newstream, ctxsync        64 small allocations, cuCtxSetLimit(stack),
//                                           a new first stream, cuCtxSynchronize
//   sleepN, busyN                           host busy-waits N ms; one block spins N ms on the GPU
//   gN[flags], sN[flags]                    what recap's replay of an N-node chain does in graph
//                                           mode / stream mode: flags `mod` (module function
//                                           instead of library kernel), `keep` (unload nothing),
//                                           `main` (the first stream instead of a new one),
//                                           `noev` (no events), `shared` (libraries loaded once)
//   while1, while2, while3                  time WHILE loops: one kernel that sets the condition
//                                           (the floor's shape); recap's body + condition kernel
//                                           with a plain edge; the same with a programmatic edge
//   while4                                  while3 with cuGraphUpload before its first launch
//   whileplace                              while3 with its three words at 24 other addresses
// Finding (an H100, driver 580): only kernel launches (cuLaunchKernel) on a second stream change
// it, e.g. `s1 s1` or `stream s1`; `s1main s1main` and every graph-only sequence do not.
// Build: g++ -O2 launch_modes.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
// Run:   ./a.out DIR STEP...   DIR holds one.ptx (beside this file) and recap's own kernels written out as
//        sample.ptx (sample_kernels::PTX), fill.ptx (kernels::FILL_MODULE), cond.ptx and condp.ptx
//        (kernels::CONDITION_MODULE, kernels::CONDITION_MODULE_PROGRAMMATIC)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cctype>
#include <string>
#include <vector>
#include <cuda.h>

#define DK(x) do { CUresult rc_ = (x); if (rc_ != CUDA_SUCCESS) { const char* s; cuGetErrorName(rc_, &s); printf("driver error %s at line %d: %s\n", s, __LINE__, #x); exit(1); } } while (0)
using clk = std::chrono::steady_clock;
static double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

static std::string dir;
static CUcontext ctx;
static CUstream s;
static CUfunction inc_fn;
static const int N = 1000, n = 256;

static std::string read_text(const char* name) {
  std::string path = dir + "/" + name;
  FILE* fp = fopen(path.c_str(), "rb");
  if (!fp) { printf("no %s\n", path.c_str()); exit(1); }
  std::string t; char buf[4096]; size_t got;
  while ((got = fread(buf, 1, sizeof buf, fp)) > 0) t.append(buf, got);
  fclose(fp);
  return t;
}
static CUmodule load_module(const char* name) { std::string t = read_text(name); CUmodule m; DK(cuModuleLoadData(&m, t.c_str())); return m; }
static CUlibrary load_library(const char* name) {
  std::string t = read_text(name); CUlibrary l;
  DK(cuLibraryLoadData(&l, t.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0)); return l;
}
static CUfunction lib_fn(CUlibrary l, const char* name, CUkernel* k = nullptr) {
  CUkernel kk; DK(cuLibraryGetKernel(&kk, l, name)); CUfunction f; DK(cuKernelGetFunction(&f, kk)); if (k) *k = kk; return f;
}

static CUgraphExec chain_exec(CUdeviceptr x) {
  CUgraph g; DK(cuGraphCreate(&g, 0));
  unsigned nn = n; void* args[] = {&x, &nn};
  CUgraphNode prev = nullptr;
  for (int i = 0; i < N; i++) {
    CUDA_KERNEL_NODE_PARAMS p; memset(&p, 0, sizeof p);
    p.func = inc_fn; p.gridDimX = p.gridDimY = p.gridDimZ = 1; p.blockDimX = n; p.blockDimY = p.blockDimZ = 1; p.kernelParams = args;
    CUgraphNode node; DK(cuGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &p)); prev = node;
  }
  CUgraphExec ge; DK(cuGraphInstantiate(&ge, g, 0)); DK(cuGraphDestroy(g)); return ge;
}
static double time_exec(CUgraphExec ge) {
  DK(cuGraphLaunch(ge, s)); DK(cuStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < 25; r++) { auto a = clk::now(); DK(cuGraphLaunch(ge, s)); DK(cuStreamSynchronize(s)); t.push_back(us(a, clk::now()) / N); }
  return median(t);
}
static clk::time_point t0;
static CUgraphExec first_exec;
static CUdeviceptr first_x;
static void report(const char* after) {
  CUdeviceptr x; DK(cuMemAlloc(&x, n * 4)); DK(cuMemsetD8(x, 0, n * 4));
  CUgraphExec fresh = chain_exec(x);
  double t_fresh = time_exec(fresh);
  CUgraphExec same_buf = chain_exec(first_x);
  double t_same = time_exec(same_buf);
  double t_first = time_exec(first_exec);
  size_t stack = 0, heap = 0; DK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE)); DK(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
  printf("  %7.3f s after %-12s chain us/node: new graph new buffer %.3f | new graph first buffer %.3f | first graph %.3f   (stack limit %zu)\n",
         us(t0, clk::now()) / 1e6, after, t_fresh, t_same, t_first, stack);
  DK(cuGraphExecDestroy(fresh)); DK(cuGraphExecDestroy(same_buf)); DK(cuMemFree(x));
}

// A WHILE loop counting `counter` down from K. shape 1: one kernel per iteration that decrements
// and sets the handle itself (the floor's); shape 2/3: recap's count_down body, then recap's
// condition kernel (3: joined by a programmatic edge, the sm_90 module).
static void time_while(int shape, CUdeviceptr at = 0, unsigned gap = 0) {
  static CUmodule one = nullptr, cond = nullptr, condp = nullptr;
  static CUlibrary sample = nullptr;
  if (!sample) sample = load_library("sample.ptx");
  CUfunction body = lib_fn(sample, "count_down");
  CUfunction set = nullptr, one_fn = nullptr;
  if (shape == 1) { if (!one) one = load_module("one.ptx"); DK(cuModuleGetFunction(&one_fn, one, "count_down_set")); }
  if (shape == 2) { if (!cond) cond = load_module("cond.ptx"); DK(cuModuleGetFunction(&set, cond, "recap_set_condition")); }
  if (shape >= 3) { if (!condp) condp = load_module("condp.ptx"); DK(cuModuleGetFunction(&set, condp, "recap_set_condition")); }
  CUdeviceptr counter, acc, count;
  if (at) { counter = at; acc = at + gap; count = at + 2 * gap; }
  else { DK(cuMemAlloc(&counter, 4)); DK(cuMemAlloc(&acc, 4)); DK(cuMemAlloc(&count, 4)); }
  DK(cuMemsetD8(acc, 0, 4));
  CUgraph g; DK(cuGraphCreate(&g, 0));
  CUgraphConditionalHandle h;
  unsigned maxit = 0, first = 1, later = 0;
  void* pre_args[] = {&h, &counter, &count, &maxit, &first};
  void* tail_args[] = {&h, &counter, &count, &maxit, &later};
  void* body_args[] = {&counter, &acc};
  void* one_args[] = {&h, &counter, &acc};
  auto kparams = [](CUfunction f, void** args, unsigned threads) {
    CUDA_KERNEL_NODE_PARAMS p; memset(&p, 0, sizeof p);
    p.func = f; p.gridDimX = p.gridDimY = p.gridDimZ = 1; p.blockDimX = threads; p.blockDimY = p.blockDimZ = 1; p.kernelParams = args;
    return p;
  };
  CUgraphNode pre = nullptr;
  if (shape == 1) {
    DK(cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
  } else {
    DK(cuGraphConditionalHandleCreate(&h, g, ctx, 0, 0));
    CUDA_KERNEL_NODE_PARAMS p = kparams(set, pre_args, 1);
    DK(cuGraphAddKernelNode(&pre, g, nullptr, 0, &p));
  }
  CUgraphNodeParams cp; memset(&cp, 0, sizeof cp);
  cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  cp.conditional.handle = h; cp.conditional.type = CU_GRAPH_COND_TYPE_WHILE; cp.conditional.size = 1; cp.conditional.ctx = ctx;
  CUgraphNode cn; DK(cuGraphAddNode(&cn, g, pre ? &pre : nullptr, nullptr, pre ? 1 : 0, &cp));
  CUgraph bg = cp.conditional.phGraph_out[0];
  if (shape == 1) {
    CUDA_KERNEL_NODE_PARAMS p = kparams(one_fn, one_args, 32); CUgraphNode kn; DK(cuGraphAddKernelNode(&kn, bg, nullptr, 0, &p));
  } else {
    CUDA_KERNEL_NODE_PARAMS p = kparams(body, body_args, 32); CUgraphNode kn; DK(cuGraphAddKernelNode(&kn, bg, nullptr, 0, &p));
    CUDA_KERNEL_NODE_PARAMS q = kparams(set, tail_args, 1); CUgraphNode tn;
    if (shape == 2) {
      DK(cuGraphAddKernelNode(&tn, bg, &kn, 1, &q));  // plain edge
    } else {
      DK(cuGraphAddKernelNode(&tn, bg, nullptr, 0, &q));
      CUgraphEdgeData e; memset(&e, 0, sizeof e);
      e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC; e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
      DK(cuGraphAddDependencies(bg, &kn, &tn, &e, 1));
    }
  }
  CUgraphExec ge; DK(cuGraphInstantiate(&ge, g, 0));
  if (shape == 4) { DK(cuGraphUpload(ge, s)); DK(cuStreamSynchronize(s)); }
  std::vector<unsigned> ks = at ? std::vector<unsigned>{10000u} : std::vector<unsigned>{10u, 10000u};
  for (unsigned K : ks) {
    std::vector<double> t;
    for (int r = 0; r < 6; r++) {
      DK(cuMemcpyHtoD(counter, &K, 4));
      auto a = clk::now(); DK(cuGraphLaunch(ge, s)); DK(cuStreamSynchronize(s)); double dt = us(a, clk::now()) / K;
      unsigned left = 1; DK(cuMemcpyDtoH(&left, counter, 4));
      if (left != 0) { printf("while shape %d left %u\n", shape, left); exit(1); }
      if (r > 0) t.push_back(dt);
    }
    const char* names[] = {"", "one kernel sets the condition (floor's shape)", "body + condition kernel, plain edge", "body + condition kernel, programmatic edge", "the same, uploaded before its first launch"};
    if (at) printf("  while K=%-5u %-48s %.3f us/iter (counter, acc, count at +0x%llx, %u bytes apart)\n", K, names[shape], median(t), (unsigned long long)(at & 0xfffff), gap);
    else printf("  while K=%-5u %-48s %.3f us/iter\n", K, names[shape], median(t));
  }
  DK(cuGraphExecDestroy(ge)); DK(cuGraphDestroy(g));
}

// What recap's CudaReplay does for an n-node chain archive (graph mode, or stream mode with an
// event before and after each replay), with one factor changed at a time: `mod` uses a module's
// CUfunction instead of a library's CUkernel, `keep` unloads and frees nothing, `main` runs on the
// first stream instead of a stream of its own, `noev` records no events.
static void recap_like(bool graph, int nodes, const std::string& flags) {
  bool mod = flags.find("mod") != std::string::npos, keep = flags.find("keep") != std::string::npos;
  bool main_stream = flags.find("main") != std::string::npos, events = flags.find("noev") == std::string::npos;
  bool shared = flags.find("shared") != std::string::npos;
  static CUlibrary shared_sample = nullptr, shared_fill = nullptr;
  if (shared && !shared_sample) { shared_sample = load_library("sample.ptx"); shared_fill = load_library("fill.ptx"); }
  CUlibrary sample = shared ? shared_sample : load_library("sample.ptx"), fill = shared ? shared_fill : load_library("fill.ptx");
  CUmodule sample_mod = nullptr;
  CUkernel k; CUfunction f = lib_fn(sample, "inc", &k); lib_fn(fill, "recap_fill_u64"); lib_fn(fill, "recap_fill_bytes");
  if (mod) { sample_mod = load_module("sample.ptx"); DK(cuModuleGetFunction(&f, sample_mod, "inc")); }
  CUdeviceptr x, control; DK(cuMemAlloc(&x, n * 4)); DK(cuMemAlloc(&control, 4)); DK(cuMemsetD8(control, 0, 4));
  CUstream st = s;
  if (!main_stream) DK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CUevent e0, e1; DK(cuEventCreate(&e0, CU_EVENT_DEFAULT)); DK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  DK(cuMemsetD8Async(x, 0, n * 4, st)); DK(cuStreamSynchronize(st));
  unsigned nn = n; void* args[] = {&x, &nn};
  if (graph) {
    CUgraph g; DK(cuGraphCreate(&g, 0)); CUgraphNode prev = nullptr;
    for (int i = 0; i < nodes; i++) {
      CUDA_KERNEL_NODE_PARAMS p; memset(&p, 0, sizeof p);
      if (mod) p.func = f; else { p.kern = k; p.ctx = ctx; }
      p.gridDimX = p.gridDimY = p.gridDimZ = 1; p.blockDimX = n; p.blockDimY = p.blockDimZ = 1; p.kernelParams = args;
      CUgraphNode node; DK(cuGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &p)); prev = node;
    }
    CUgraphExec ge; DK(cuGraphInstantiate(&ge, g, 0)); DK(cuGraphUpload(ge, st)); DK(cuStreamSynchronize(st));
    for (int r = 0; r < 28; r++) { DK(cuGraphLaunch(ge, st)); DK(cuStreamSynchronize(st)); }
    if (!keep) { DK(cuGraphExecDestroy(ge)); DK(cuGraphDestroy(g)); }
  } else {
    for (int r = 0; r < 26; r++) {
      if (events) DK(cuEventRecord(e0, st));
      for (int i = 0; i < nodes; i++) DK(cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, st, args, nullptr));
      if (events) DK(cuEventRecord(e1, st));
      DK(cuStreamSynchronize(st));
      float ms; if (events) DK(cuEventElapsedTime(&ms, e0, e1));
    }
  }
  unsigned back[n]; DK(cuMemcpyDtoH(back, x, n * 4));
  if (!keep) {
    DK(cuEventDestroy(e0)); DK(cuEventDestroy(e1)); if (!main_stream) DK(cuStreamDestroy(st));
    DK(cuMemFree(x)); DK(cuMemFree(control)); if (!shared) { DK(cuLibraryUnload(sample)); DK(cuLibraryUnload(fill)); }
    if (sample_mod) DK(cuModuleUnload(sample_mod));
  }
}

int main(int argc, char** argv) {
  if (argc < 2) { printf("usage: %s DIR STEP...\n", argv[0]); return 2; }
  dir = argv[1];
  t0 = clk::now();
  DK(cuInit(0)); CUdevice dev; DK(cuDeviceGet(&dev, 0));
  DK(cuDevicePrimaryCtxRetain(&ctx, dev)); DK(cuCtxSetCurrent(ctx));
  { CUdeviceptr p; DK(cuMemAlloc(&p, 4)); DK(cuMemFree(p)); DK(cuCtxSynchronize()); }
  DK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUmodule m = load_module("sample.ptx"); DK(cuModuleGetFunction(&inc_fn, m, "inc"));
  DK(cuMemAlloc(&first_x, n * 4)); DK(cuMemsetD8(first_x, 0, n * 4));
  first_exec = chain_exec(first_x);
  std::string steps; for (int i = 2; i < argc; i++) { steps += " "; steps += argv[i]; }
  printf("process with steps:%s\n", steps.c_str());
  report("start");
  for (int i = 2; i < argc; i++) {
    std::string st = argv[i];
    if (st == "cond") { CUmodule c = load_module("cond.ptx"); CUfunction f; DK(cuModuleGetFunction(&f, c, "recap_set_condition")); }
    else if (st == "condp") { CUmodule c = load_module("condp.ptx"); CUfunction f; DK(cuModuleGetFunction(&f, c, "recap_set_condition")); }
    else if (st == "condunload") { CUmodule c = load_module("condp.ptx"); CUfunction f; DK(cuModuleGetFunction(&f, c, "recap_set_condition")); DK(cuModuleUnload(c)); }
    else if (st == "condlib") { CUlibrary l = load_library("condp.ptx"); lib_fn(l, "recap_set_condition"); }
    else if (st == "one") { CUmodule c = load_module("one.ptx"); CUfunction f; DK(cuModuleGetFunction(&f, c, "count_down_set")); }
    else if (st == "fill") { CUlibrary l = load_library("fill.ptx"); lib_fn(l, "recap_fill_u64"); lib_fn(l, "recap_fill_bytes"); }
    else if (st == "sample") { CUlibrary l = load_library("sample.ptx"); lib_fn(l, "inc"); }
    else if (st == "stack") { DK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096)); }
    else if (st == "stream") {
      CUdeviceptr x; DK(cuMemAlloc(&x, n * 4)); unsigned nn = n; void* args[] = {&x, &nn};
      for (int i = 0; i < 1000; i++) DK(cuLaunchKernel(inc_fn, 1, 1, 1, n, 1, 1, 0, s, args, nullptr));
      DK(cuStreamSynchronize(s));
    }
    else if (st == "alloc") { for (int i = 0; i < 64; i++) { CUdeviceptr p; DK(cuMemAlloc(&p, 1024)); } }
    else if (st == "while1") time_while(1);
    else if (st == "while2") time_while(2);
    else if (st == "while3") time_while(3);
    else if (st == "while4") time_while(4);
    else if (st == "whileplace") {
      // The same loop with its three words at other places of one 2 MiB allocation.
      CUdeviceptr big; DK(cuMemAlloc(&big, 2 << 20));
      unsigned offsets[] = {0, 0x400, 0x1000, 0x3300, 0x8000, 0x10a00, 0x40000, 0x77700};
      unsigned gaps[] = {4, 256, 4096};
      for (unsigned o : offsets) for (unsigned g : gaps) { DK(cuMemsetD8(big + o, 0, 3 * g)); time_while(3, big + o, g); }
    }
    else if (st == "newstream") DK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    else if (st == "ctxsync") DK(cuCtxSynchronize());
    else if (st.rfind("sleep", 0) == 0) { auto until = clk::now() + std::chrono::milliseconds(atoi(st.c_str() + 5)); while (clk::now() < until) {} }
    else if (st.rfind("busy", 0) == 0) {
      // one block spinning for N ms (sample.ptx's stamp_spin), the host waiting
      CUmodule sm = load_module("sample.ptx"); CUfunction spin; DK(cuModuleGetFunction(&spin, sm, "stamp_spin"));
      CUdeviceptr out; DK(cuMemAlloc(&out, 16)); unsigned long long ns = 1000000ull * atoi(st.c_str() + 4);
      void* args[] = {&out, &ns}; DK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr)); DK(cuStreamSynchronize(s));
    }
    else if ((st[0] == 'g' || st[0] == 's') && st.size() > 1 && isdigit((unsigned char)st[1])) {
      // g10, s10, g10mod, s10noev, g10keep, g10main ...: recap_like with those settings
      size_t digits = 1; while (digits < st.size() && isdigit((unsigned char)st[digits])) digits++;
      recap_like(st[0] == 'g', atoi(st.substr(1, digits - 1).c_str()), st.substr(digits));
    }
    else { printf("unknown step %s\n", st.c_str()); return 2; }
    report(st.c_str());
  }
  printf("ok\n");
  return 0;
}
