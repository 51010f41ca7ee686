#include <cstdio>
__global__ void add(float* a, const float* b, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) a[i]+=b[i];}
int main(){float *a,*b; cudaMalloc(&a,1024*4); cudaMalloc(&b,1024*4); cudaMemset(a,0,4096); cudaMemset(b,0,4096); add<<<4,256>>>(a,b,1024); cudaDeviceSynchronize(); printf("ok\n");}
