package io.engramhost.os.internal;

import jnr.ffi.LibraryLoader;
import jnr.ffi.Runtime;

/**
 * Binds {@link LibC}, the calls of a client's import, once; {@link LibCMoreHolder} binds the others when first used.
 * {@link #errno()} is the same for both.
 */
public final class LibCHolder {
    public static final LibC LIBC = LibraryLoader.create(LibC.class).failImmediately().load("c");
    public static final Runtime RUNTIME = Runtime.getRuntime(LIBC);

    private LibCHolder() {
    }

    /** errno saved by the last call on this thread. */
    public static int errno() {
        return RUNTIME.getLastError();
    }
}
