//! Matrix products through the `gemm` project's f32 and f64 crates, on row-major slices.
//!
//! Small f32 products (an attention head's `q·kᵀ`, `P·v` and their backward) go
//! to a kernel of our own on AVX-512 (`direct.rs`), which skips most of `gemm`'s
//! packing and computes `gemm`'s bits; the rest go to `gemm`.
//!
//! Layers call [`matmul`] inside per-sample (or per-chunk) work that `rayon` already
//! spreads over the cores, so the product itself runs single-threaded by default;
//! [`matmul_par`] is for the rare large product outside such a loop.
//!
//! ```
//! use mechlab_engine::matmul::{matmul, Op};
//! // c[2,2] = a[2,3] · b[3,2]
//! let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let b = [1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0];
//! let mut c = [0.0f64; 4];
//! matmul(&mut c, &a, Op::N, &b, Op::N, 2, 3, 2, false);
//! assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
//! ```

use crate::Float;
use gemm_common::Parallelism;

// compiled for the tests too, so that a build without the feature checks it
#[cfg(any(test, feature = "product-clock"))]
mod clock;
mod direct;

/// What the `product-clock` feature has timed so far (see `matmul/clock.rs`):
/// one line per operand layout with its calls, GFLOP and one thread's GFLOP/s;
/// `None` in a build without the feature.
pub fn product_clock_report() -> Option<String> {
    #[cfg(feature = "product-clock")]
    return Some(clock::report());
    #[cfg(not(feature = "product-clock"))]
    None
}

/// Whether an operand is used as stored (`N`) or transposed (`T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    N,
    T,
}

/// `c[m, n] (+)= op(a)[m, k] · op(b)[k, n]`, all row-major.
///
/// With `Op::N`, `a` is stored `[m, k]`; with `Op::T` it is stored `[k, m]` and used
/// transposed (likewise `b`: `[k, n]` or `[n, k]`). `accumulate` adds into `c`
/// instead of overwriting it (gradient accumulation).
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Float>(
    c: &mut [T],
    a: &[T],
    op_a: Op,
    b: &[T],
    op_b: Op,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
) {
    matmul_par(c, a, op_a, b, op_b, m, k, n, accumulate, 1)
}

/// [`matmul`] spread over `threads` threads by `gemm` itself (one thread:
/// [`matmul`], which may take the direct small-product kernel).
#[allow(clippy::too_many_arguments)]
pub fn matmul_par<T: Float>(
    c: &mut [T],
    a: &[T],
    op_a: Op,
    b: &[T],
    op_b: Op,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
    threads: usize,
) {
    let par = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    let (lda, ldb) = natural_ld(op_a, op_b, m, k, n);
    let p = Product {
        c,
        ldc: n,
        a,
        lda,
        op_a,
        b,
        ldb,
        op_b,
        m,
        k,
        n,
        accumulate,
    };
    gemm_with(p, par)
}

/// [`matmul`] on sub-matrices with explicit row strides ("leading dimensions").
///
/// Each operand is a row-major matrix *as stored* whose consecutive rows start
/// `ld` elements apart (`ld` ≥ its stored row length): `c` is stored `[m, n]` with
/// row stride `ldc`; `a` is stored `[m, k]` (`Op::N`) or `[k, m]` (`Op::T`) with row
/// stride `lda`; `b` is stored `[k, n]` or `[n, k]` with row stride `ldb`. Slices
/// start at the matrix's first element. This is how attention multiplies one
/// head's `[T, d_head]` slice out of a `[T, H, d_head]` buffer without copying:
///
/// ```
/// use mechlab_engine::matmul::{matmul_strided, Op};
/// // x: [T=2, H=2, d=2]; head 1 of x times its own transpose: [2, 2]
/// let x = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
/// let mut g = [0.0f64; 4];
/// matmul_strided(&mut g, 2, &x[2..], 4, Op::N, &x[2..], 4, Op::T, 2, 2, 2, false);
/// assert_eq!(g, [25.0, 53.0, 53.0, 113.0]);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn matmul_strided<T: Float>(
    c: &mut [T],
    ldc: usize,
    a: &[T],
    lda: usize,
    op_a: Op,
    b: &[T],
    ldb: usize,
    op_b: Op,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
) {
    let p = Product {
        c,
        ldc,
        a,
        lda,
        op_a,
        b,
        ldb,
        op_b,
        m,
        k,
        n,
        accumulate,
    };
    gemm_with(p, Parallelism::None)
}

/// One right operand `b`, stored `[n, k]` with row stride `ldb` and used
/// transposed, shared by several products that each take a prefix of its
/// columns (causal attention's query blocks, each against the keys it may see):
/// see [`with_b_transposed`].
pub struct TransposedB<'a, T> {
    b: &'a [T],
    ldb: usize,
    n: usize,
    k: usize,
    /// `b` in `[k, n]` order, where the direct kernel runs.
    copy: Option<&'a [T]>,
}

impl<T: Float> TransposedB<'_, T> {
    /// `c[m, n] (+)= op(a)[m, k] · bᵀ[k, :n]` for the first `n` columns, as
    /// [`matmul_strided`] with `b` and `Op::T` computes it, bit for bit.
    #[allow(clippy::too_many_arguments)]
    pub fn product(
        &self,
        c: &mut [T],
        ldc: usize,
        a: &[T],
        lda: usize,
        op_a: Op,
        m: usize,
        n: usize,
        accumulate: bool,
    ) {
        assert!(
            n <= self.n,
            "matmul: {n} columns of a shared b of {}",
            self.n
        );
        let k = self.k;
        match self.copy {
            // exactly the products the direct kernel takes with `b` transposed,
            // which it would copy into this order itself: the same kernel on the
            // same numbers
            Some(bt) if direct::takes(Op::T, m, k, n) => {
                matmul_strided(c, ldc, a, lda, op_a, bt, self.n, Op::N, m, k, n, accumulate)
            }
            _ => matmul_strided(
                c,
                ldc,
                a,
                lda,
                op_a,
                self.b,
                self.ldb,
                Op::T,
                m,
                k,
                n,
                accumulate,
            ),
        }
    }
}

/// Runs `f` on `b` (`[n, k]`, row stride `ldb`, used transposed) for several
/// products ([`TransposedB::product`]). Where the direct kernel runs (f32 at the
/// AVX-512 level) `b` is copied into `[k, n]` order once, into a thread's own
/// buffer, and each product the kernel takes reads that copy instead of making
/// its own: a causal attention head pays for one copy of its keys instead of
/// one per query block. Every product is computed as it would be without the
/// shared copy, bit for bit.
///
/// ```
/// use mechlab_engine::matmul::{with_b_transposed, Op};
/// // c[1, 2] = a[1, 2] · bᵀ, b stored [2, 2]
/// let (a, b) = ([1.0f32, 2.0], [3.0f32, 4.0, 5.0, 6.0]);
/// let mut c = [0.0f32; 2];
/// with_b_transposed(&b, 2, 2, 2, |bt| bt.product(&mut c, 2, &a, 2, Op::N, 1, 2, false));
/// assert_eq!(c, [11.0, 17.0]);
/// ```
pub fn with_b_transposed<T: Float, R>(
    b: &[T],
    ldb: usize,
    n: usize,
    k: usize,
    f: impl FnOnce(&TransposedB<'_, T>) -> R,
) -> R {
    assert!(ldb >= k, "matmul: ldb {ldb} < k {k}");
    assert!(
        b.len() >= span(n, k, ldb),
        "matmul: b has {} < {n}x{k}",
        b.len()
    );
    let shared = |copy| TransposedB { b, ldb, n, k, copy };
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && crate::simd::level() == crate::simd::Level::Avx512
    {
        // SAFETY: T is f32 (checked just above), so this is the same slice.
        let b32 = unsafe { std::slice::from_raw_parts(b.as_ptr() as *const f32, b.len()) };
        return direct::with_transposed(b32, ldb, n, k, |bt| {
            // SAFETY: as above, T is f32
            let bt = unsafe { std::slice::from_raw_parts(bt.as_ptr() as *const T, bt.len()) };
            f(&shared(Some(bt)))
        });
    }
    f(&shared(None))
}

/// The SIMD level `gemm` dispatches to on this processor: `"avx512f"` (its `x86-v4`
/// kernels, which the workspace enables; chosen at run time), `"fma"` (its 256-bit kernels), or
/// `"scalar"`. Benchmarks print it beside their numbers.
pub fn gemm_kernel() -> &'static str {
    // gemm-common's own dispatch: AVX-512F, else FMA (its 256-bit kernels), else scalar
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "avx512f";
        }
        if std::arch::is_x86_feature_detected!("fma") {
            return "fma";
        }
    }
    "scalar"
}

/// This machine's measured matrix-product rate in GFLOP/s: the best of `reps` square
/// `n`-sized products (`2n³` FLOPs each) on `threads` threads, after one warm-up.
/// Benchmarks divide their executed FLOP/s by it ("share of peak"); `bench/peak`
/// prints it for f32 and f64 at several sizes.
pub fn measured_peak_gflops<T: Float>(n: usize, threads: usize, reps: usize) -> f64 {
    let a = vec![T::of(1.0); n * n];
    let b = vec![T::of(0.5); n * n];
    let mut c = vec![T::zero(); n * n];
    matmul_par(&mut c, &a, Op::N, &b, Op::N, n, n, n, false, threads);
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t0 = std::time::Instant::now();
        matmul_par(&mut c, &a, Op::N, &b, Op::N, n, n, n, false, threads);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    2.0 * (n * n * n) as f64 / best / 1e9
}

/// Whether `gemm` computes in `T` (f32 and f64; not the double-double).
fn gemm_supports<T: Float>() -> bool {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    t == TypeId::of::<f32>() || t == TypeId::of::<f64>()
}

/// The product for types `gemm` does not know ([`crate::F64x2`]): each entry an
/// in-order sum over `k`. It is for precision checks, not speed.
fn ordered_product<T: Float>(p: Product<'_, T>) {
    let ((a_row, a_depth), (b_depth, b_col)) = (p.a_steps(), p.b_steps());
    for i in 0..p.m {
        for j in 0..p.n {
            let mut s = T::zero();
            for q in 0..p.k {
                s += p.a[i * a_row + q * a_depth] * p.b[q * b_depth + j * b_col];
            }
            let o = &mut p.c[i * p.ldc + j];
            *o = if p.accumulate { *o + s } else { s };
        }
    }
}

fn natural_ld(op_a: Op, op_b: Op, m: usize, k: usize, n: usize) -> (usize, usize) {
    let lda = match op_a {
        Op::N => k,
        Op::T => m,
    };
    let ldb = match op_b {
        Op::N => n,
        Op::T => k,
    };
    (lda, ldb)
}

/// Elements a stored `[rows, cols]` matrix with row stride `ld` spans.
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    }
}

/// One product, `c[m, n] (+)= op(a)[m, k] · op(b)[k, n]`, every matrix row-major
/// with its own row stride (see [`matmul_strided`]): what [`gemm_with`] checks and
/// then hands to one of the three ways of computing it.
struct Product<'a, T> {
    c: &'a mut [T],
    ldc: usize,
    a: &'a [T],
    lda: usize,
    op_a: Op,
    b: &'a [T],
    ldb: usize,
    op_b: Op,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
}

impl<T: Float> Product<'_, T> {
    /// Where `op(a)(i, q)` is stored: `a[i·row + q·depth]`, as `(row, depth)`.
    fn a_steps(&self) -> (usize, usize) {
        match self.op_a {
            Op::N => (self.lda, 1),
            Op::T => (1, self.lda),
        }
    }
    /// Where `op(b)(q, j)` is stored: `b[q·depth + j·col]`, as `(depth, col)`.
    fn b_steps(&self) -> (usize, usize) {
        match self.op_b {
            Op::N => (self.ldb, 1),
            Op::T => (1, self.ldb),
        }
    }
    /// The same product on `f32` slices, when `T` is `f32`.
    fn as_f32(&mut self) -> Option<Product<'_, f32>> {
        if std::any::TypeId::of::<T>() != std::any::TypeId::of::<f32>() {
            return None;
        }
        // SAFETY: T is f32 (checked just above), so these are the same slices.
        let (c, a, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.c.as_mut_ptr() as *mut f32, self.c.len()),
                std::slice::from_raw_parts(self.a.as_ptr() as *const f32, self.a.len()),
                std::slice::from_raw_parts(self.b.as_ptr() as *const f32, self.b.len()),
            )
        };
        Some(Product {
            c,
            ldc: self.ldc,
            a,
            lda: self.lda,
            op_a: self.op_a,
            b,
            ldb: self.ldb,
            op_b: self.op_b,
            m: self.m,
            k: self.k,
            n: self.n,
            accumulate: self.accumulate,
        })
    }
}

/// Checks that every index of `p` is inside its slice, then computes it: the
/// in-order sum for types `gemm` does not know, the direct kernel for the small
/// f32 products it takes, `gemm` for the rest.
fn gemm_with<T: Float>(p: Product<'_, T>, par: Parallelism) {
    let (m, k, n) = (p.m, p.k, p.n);
    let (ldc, lda, ldb) = (p.ldc, p.lda, p.ldb);
    // Stored shapes: a is [m, k] or [k, m], b is [k, n] or [n, k].
    let (a_rows, a_cols) = match p.op_a {
        Op::N => (m, k),
        Op::T => (k, m),
    };
    let (b_rows, b_cols) = match p.op_b {
        Op::N => (k, n),
        Op::T => (n, k),
    };
    assert!(ldc >= n, "matmul: ldc {ldc} < n {n}");
    assert!(lda >= a_cols, "matmul: lda {lda} < {a_cols}");
    assert!(ldb >= b_cols, "matmul: ldb {ldb} < {b_cols}");
    let (sc, sa, sb) = (
        span(m, n, ldc),
        span(a_rows, a_cols, lda),
        span(b_rows, b_cols, ldb),
    );
    assert!(
        p.c.len() >= sc,
        "matmul: c has {} < {sc} for {m}x{n}",
        p.c.len()
    );
    assert!(
        p.a.len() >= sa,
        "matmul: a has {} < {sa} for {m}x{k}",
        p.a.len()
    );
    assert!(
        p.b.len() >= sb,
        "matmul: b has {} < {sb} for {k}x{n}",
        p.b.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !p.accumulate {
            for i in 0..m {
                p.c[i * ldc..i * ldc + n]
                    .iter_mut()
                    .for_each(|x| *x = T::zero());
            }
        }
        return;
    }
    if !gemm_supports::<T>() {
        ordered_product(p);
        return;
    }
    #[cfg(feature = "product-clock")]
    if clock::takes(&p, par) {
        clock::timed(p, par);
        return;
    }
    dispatch(p, par);
}

/// The direct kernel for the small f32 products it takes, `gemm` for the rest.
fn dispatch<T: Float>(mut p: Product<'_, T>, par: Parallelism) {
    if matches!(par, Parallelism::None) {
        if let Some(p32) = p.as_f32() {
            if direct::product(p32) {
                return;
            }
        }
    }
    call_gemm(p, par);
}

/// The product through `gemm` itself, once [`gemm_with`] has checked the bounds
/// and that `T` is f32 or f64.
fn call_gemm<T: Float>(p: Product<'_, T>, par: Parallelism) {
    // (row stride, column stride) of each operand as gemm sees it.
    let ((a_rs, a_cs), (b_rs, b_cs)) = (p.a_steps(), p.b_steps());
    let (a_rs, a_cs, b_rs, b_cs) = (a_rs as isize, a_cs as isize, b_rs as isize, b_cs as isize);
    let (m, k, n, accumulate) = (p.m, p.k, p.n, p.accumulate);
    // gemm's kernels prefer a column-major destination: ours is row-major, so
    // (unless it is a single column) compute the transpose, cᵀ = op(b)ᵀ · op(a)ᵀ,
    // by swapping the operands and each one's strides. The `gemm` facade crate
    // does the same before its dispatch; we call the f32 and f64 crates directly
    // because the facade also builds the complex-number kernels, which nothing
    // here uses (about 30 s of CPU in every clean build).
    // Each operand as (pointer, column stride, row stride).
    let (lhs, rhs) = ((p.a.as_ptr(), a_cs, a_rs), (p.b.as_ptr(), b_cs, b_rs));
    let (dst_cs, dst_rs) = (1isize, p.ldc as isize);
    let transpose = dst_cs.abs() < dst_rs.abs();
    let (m, n, (dst_cs, dst_rs)) = if transpose {
        (n, m, (dst_rs, dst_cs))
    } else {
        (m, n, (dst_cs, dst_rs))
    };
    let ((lhs, lhs_cs, lhs_rs), (rhs, rhs_cs, rhs_rs)) = if transpose {
        ((rhs.0, rhs.2, rhs.1), (lhs.0, lhs.2, lhs.1))
    } else {
        (lhs, rhs)
    };
    let dst = p.c.as_mut_ptr();
    // SAFETY: `gemm_with`'s asserts guarantee every index gemm touches is in bounds for the
    // given strides; c does not alias a or b (they are distinct borrows). Every
    // stride is positive. The casts only rename T: `gemm_with` checked that T is
    // f32 or f64, and the TypeId picks which.
    unsafe {
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
            gemm_f32::gemm::f32::get_gemm_fn()(
                m,
                n,
                k,
                dst as *mut f32,
                dst_cs,
                dst_rs,
                accumulate,
                lhs as *const f32,
                lhs_cs,
                lhs_rs,
                rhs as *const f32,
                rhs_cs,
                rhs_rs,
                1.0,
                1.0,
                false,
                false,
                false,
                par,
            )
        } else {
            gemm_f64::gemm::f64::get_gemm_fn()(
                m,
                n,
                k,
                dst as *mut f64,
                dst_cs,
                dst_rs,
                accumulate,
                lhs as *const f64,
                lhs_cs,
                lhs_rs,
                rhs as *const f64,
                rhs_cs,
                rhs_rs,
                1.0,
                1.0,
                false,
                false,
                false,
                par,
            )
        }
    }
}

#[cfg(test)]
mod tests;
