// What the CUDA runtime programs here share: CHECK on every runtime call, and the graph API's
// spellings across CUDA 12 and 13.
#pragma once

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

// CUDA 13 gave cudaGraphAddNode and cudaGraphAddDependencies the per-edge data argument that CUDA
// 12.3 had added as their _v2 forms; no edge data here.
#if CUDART_VERSION >= 13000
#define ADD_NODE(node, graph, deps, n, params) cudaGraphAddNode(node, graph, deps, NULL, n, params)
#define ADD_DEPENDENCIES(graph, from, to, n) cudaGraphAddDependencies(graph, from, to, NULL, n)
#else
#define ADD_NODE(node, graph, deps, n, params) cudaGraphAddNode(node, graph, deps, n, params)
#define ADD_DEPENDENCIES(graph, from, to, n) cudaGraphAddDependencies(graph, from, to, n)
#endif

// cudaGraphNodeParams has no default constructor in C++ (its union holds members that have one):
// zeroed storage of its size stands in, as C code would write it.
#define ZEROED_NODE_PARAMS(name)                                                          \
  alignas(cudaGraphNodeParams) static unsigned char name##_bytes[sizeof(cudaGraphNodeParams)]; \
  memset(name##_bytes, 0, sizeof name##_bytes);                                           \
  cudaGraphNodeParams& name = *reinterpret_cast<cudaGraphNodeParams*>(name##_bytes)
