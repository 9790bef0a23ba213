package io.engramhost.os.internal;

import com.kenai.jffi.CallContext;
import com.kenai.jffi.CallContextCache;
import com.kenai.jffi.CallingConvention;
import com.kenai.jffi.HeapInvocationBuffer;
import com.kenai.jffi.Invoker;
import com.kenai.jffi.Library;
import com.kenai.jffi.Type;

/**
 * The two libc calls that take more than five arguments, {@code mmap} (six) and {@code syscall} (seven), called
 * through jffi's own invokers instead of a jnr-ffi interface. jnr-ffi's x86-64 stub compiler passes a garbage sixth
 * argument (jnr-ffi issue 181); {@code -Djnr.ffi.x86asm.enabled=false} avoids it only when it is set before anything
 * in the JVM first uses jnr-ffi, which a library cannot promise. jffi's invokers pass every argument through its C
 * trampoline, so these two calls are right in any JVM, flag or not, and no other call of the project has six
 * arguments (NativeBindingsTest checks that). errno is saved by jffi, where {@link LibCHolder#errno()} reads it.
 */
public final class WideCalls {
    private static final Invoker INVOKER = Invoker.getInstance();
    private static final long MMAP = symbol("mmap");
    private static final long SYSCALL = symbol("syscall");
    private static final CallContext MMAP_CALL = CallContextCache.getInstance().getCallContext(Type.POINTER,
            new Type[] {Type.POINTER, Type.ULONG, Type.SINT, Type.SINT, Type.SINT, Type.SLONG},
            CallingConvention.DEFAULT, true);
    private static final CallContext SYSCALL_CALL = CallContextCache.getInstance().getCallContext(Type.SLONG,
            new Type[] {Type.SLONG, Type.SLONG, Type.SLONG, Type.SLONG, Type.SLONG, Type.SLONG, Type.SLONG},
            CallingConvention.DEFAULT, true);

    private WideCalls() {
    }

    /** {@code mmap(2)}: the address, or {@code MAP_FAILED} (-1) with errno set. */
    public static long mmap(long addr, long length, int prot, int flags, int fd, long offset) {
        return INVOKER.invokeN6(MMAP_CALL, MMAP, addr, length, prot, flags, fd, offset);
    }

    /** {@code syscall(2)} with six arguments: the result, or -1 with errno set. */
    public static long syscall(long number, long a1, long a2, long a3, long a4, long a5, long a6) {
        HeapInvocationBuffer args = new HeapInvocationBuffer(SYSCALL_CALL);
        args.putLong(number);
        args.putLong(a1);
        args.putLong(a2);
        args.putLong(a3);
        args.putLong(a4);
        args.putLong(a5);
        args.putLong(a6);
        return INVOKER.invokeLong(SYSCALL_CALL, SYSCALL, args);
    }

    private static long symbol(String name) {
        long address = Library.getDefault().getSymbolAddress(name);
        if (address == 0) {
            throw new UnsatisfiedLinkError("libc's " + name + " not found: " + Library.getLastError());
        }
        return address;
    }
}
