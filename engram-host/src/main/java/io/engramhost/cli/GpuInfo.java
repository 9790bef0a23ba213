package io.engramhost.cli;

/** What the CLI needs to know about GPUs. */
final class GpuInfo {
    private GpuInfo() {
    }

    /** The UUID of GPU {@code device}, for {device_uuid}. */
    static String uuidOf(int device) {
        throw new IllegalArgumentException("{device_uuid} needs the CUDA driver, which this build does not use yet");
    }
}
