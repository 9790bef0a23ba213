package io.engramhost.cuda;

import io.engramhost.cuda.internal.CuStructs;
import java.util.ArrayList;
import java.util.List;
import jnr.ffi.Pointer;

/**
 * A kernel's parameters in order, as cuLaunchKernel takes them: an array of pointers, each to one
 * argument's value. Pointers and 64-bit integers are {@link #add(long)}, 32-bit ones {@link #addInt(int)}.
 */
public final class KernelArgs {
    private final List<Long> values = new ArrayList<>();
    private final List<Boolean> wide = new ArrayList<>();

    public KernelArgs add(long value) {
        values.add(value);
        wide.add(true);
        return this;
    }

    public KernelArgs addInt(int value) {
        values.add((long) value);
        wide.add(false);
        return this;
    }

    public int count() {
        return values.size();
    }

    /**
     * {@code [0]} is the {@code void**} array, {@code [1]} the memory holding the values; both must
     * stay reachable until cuLaunchKernel returns (it copies the values).
     */
    Pointer[] toParams() {
        int n = values.size();
        Pointer vals = CuStructs.zeroed(Math.max(8, 8 * n));
        Pointer params = CuStructs.zeroed(Math.max(8, 8 * n));
        for (int i = 0; i < n; i++) {
            if (wide.get(i)) {
                vals.putLong(8L * i, values.get(i));
            } else {
                vals.putInt(8L * i, (int) (long) values.get(i));
            }
            params.putAddress(8L * i, vals.address() + 8L * i);
        }
        return new Pointer[] {params, vals};
    }
}
