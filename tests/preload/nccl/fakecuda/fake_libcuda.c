/*
 * A libcuda.so.1 with no driver behind it (test preload-nccl-cuda-unknown): preloaded, it
 * stands for a program that loaded the driver itself, so that libcudart's cudaGetDeviceCount
 * fails with something other than cudaErrorNoDevice (cudaErrorInsufficientDriver: libcudart
 * finds none of the entry points it needs) while device pointers could exist.
 */
__attribute__((visibility("default"))) int cuInit(unsigned int flags);

int cuInit(unsigned int flags)
{
    (void)flags;
    return 999; /* CUDA_ERROR_UNKNOWN */
}
