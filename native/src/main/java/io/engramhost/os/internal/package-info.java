/**
 * JNR bindings, loaded once. Internal: do not use directly; the checked wrappers in
 * {@link io.engramhost.os} name the call and errno on every failure.
 */
package io.engramhost.os.internal;
