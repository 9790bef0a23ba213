package io.engramhost.os.internal;

import jnr.ffi.LibraryLoader;

/** Binds {@link LibCMore} once, when a call of it is first made (this class's initialisation). */
public final class LibCMoreHolder {
    public static final LibCMore MORE = LibraryLoader.create(LibCMore.class).failImmediately().load("c");

    private LibCMoreHolder() {
    }
}
