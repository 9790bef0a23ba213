package io.engramhost.cuda;

/**
 * A CUmemLocation: where memory lives or who accesses it. {@code id} is a device ordinal for
 * DEVICE and a NUMA node for HOST_NUMA (ignored by the driver in access descriptors).
 */
public record Location(int type, int id) {
    public static final int TYPE_DEVICE = 1;
    public static final int TYPE_HOST = 2;
    public static final int TYPE_HOST_NUMA = 3;

    public static Location device(int ordinal) {
        return new Location(TYPE_DEVICE, ordinal);
    }

    public static Location hostNuma(int node) {
        return new Location(TYPE_HOST_NUMA, node);
    }

    public boolean isDevice() {
        return type == TYPE_DEVICE;
    }

    public boolean isHostNuma() {
        return type == TYPE_HOST_NUMA;
    }

    @Override
    public String toString() {
        switch (type) {
            case TYPE_DEVICE:
                return "GPU " + id;
            case TYPE_HOST:
                return "HOST";
            case TYPE_HOST_NUMA:
                return "HOST_NUMA node " + id;
            default:
                return "location type " + type + " id " + id;
        }
    }
}
