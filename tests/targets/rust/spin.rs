// spin [SECONDS]: a Rust target whose hot functions have names that only a
// Rust demangler prints right: a method of a generic type (Busy<T>::spin,
// instantiated for u64 and for a tuple, on threads "spin-u64" and
// "spin-tuple"), and on thread "closure" a closure inside a generic function
// that calls a trait method of a generic type (<Busy<T> as Step>::step).
//
// Compiled by tests/integration/test-rust.c with rustc, once with the legacy
// mangling and once with v0. Prints "ready" once its threads run, exits by
// itself after SECONDS (default 5, at most 50).
use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

// std::hint::black_box is stable only from Rust 1.66; Debian 12 has 1.63.
#[inline(always)]
fn black_box<T: Copy>(x: T) -> T {
    // SAFETY: reads a live local of a Copy type.
    unsafe { std::ptr::read_volatile(&x) }
}

pub struct Busy<T> {
    state: T,
}

pub trait Step {
    fn step(&mut self) -> u64;
}

pub trait Mix: Copy {
    fn mix(self, x: u64) -> Self;
}

impl Mix for u64 {
    #[inline(always)]
    fn mix(self, x: u64) -> u64 {
        self.wrapping_mul(6364136223846793005).wrapping_add(x)
    }
}

impl Mix for (u32, i8) {
    #[inline(always)]
    fn mix(self, x: u64) -> (u32, i8) {
        (self.0.wrapping_mul(1664525).wrapping_add(x as u32), self.1.wrapping_add(1))
    }
}

impl<T: Mix> Busy<T> {
    #[inline(never)]
    pub fn spin(&mut self, until: Instant) -> u64 {
        let mut n = 0u64;
        while Instant::now() < until {
            for i in 0..20000u64 {
                self.state = black_box(self.state.mix(i));
            }
            n += 1;
        }
        n
    }
}

impl<T: Mix> Step for Busy<T> {
    #[inline(never)]
    fn step(&mut self) -> u64 {
        let mut x = 0u64;
        for i in 0..20000u64 {
            self.state = black_box(self.state.mix(i));
            x = x.wrapping_add(i);
        }
        x
    }
}

// Called through a trait object the optimizer cannot see through, so that
// the closure stays a function of its own: a frame, named
// "spin::in_closure::{{closure}}" (legacy) or
// "spin::in_closure::<u64>::{closure#0}" (v0).
#[inline(never)]
fn run_closure(until: Instant, f: &mut dyn FnMut() -> u64) -> u64 {
    let mut n = 0u64;
    while Instant::now() < until {
        n = n.wrapping_add(f());
    }
    n
}

#[inline(never)]
fn in_closure<T: Mix>(until: Instant, seed: T) -> u64 {
    let mut b = Busy { state: seed };
    let mut body = || {
        let mut y = 0u64;
        for i in 0..20000u64 {
            y = black_box(y.mix(i));
        }
        y ^ b.step()
    };
    let f = black_box(&mut body as *mut dyn FnMut() -> u64);
    // SAFETY: f is &mut body, which outlives the call.
    run_closure(until, unsafe { &mut *f })
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .min(50);
    let until = Instant::now() + Duration::from_secs(secs);
    let a = thread::Builder::new()
        .name("spin-u64".into())
        .spawn(move || Busy { state: 1u64 }.spin(until))
        .unwrap();
    let b = thread::Builder::new()
        .name("spin-tuple".into())
        .spawn(move || Busy { state: (1u32, 0i8) }.spin(until))
        .unwrap();
    let c = thread::Builder::new()
        .name("closure".into())
        .spawn(move || in_closure(until, 7u64))
        .unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let n = a.join().unwrap() + b.join().unwrap() + c.join().unwrap();
    black_box(n);
}
