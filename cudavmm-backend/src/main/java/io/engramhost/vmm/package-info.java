/**
 * The cuda-vmm backend: tables in CUDA virtual-memory allocations exported as POSIX fds. The daemon
 * creates and fills {@link io.engramhost.vmm.HostNumaAllocation}s (or
 * {@link io.engramhost.vmm.DeviceAllocation}s); an engine receives their fds and maps them all into
 * one VA range with {@link io.engramhost.vmm.VmmImport}.
 */
package io.engramhost.vmm;
