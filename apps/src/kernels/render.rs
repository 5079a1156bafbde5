//! Ray-casting volume rendering (Render-sockets' kernel, seed 001 §3): a procedural data set,
//! a camera, a transfer function, and a ray caster whose every pixel depends on the pixel
//! alone, never on the tile it is rendered in.
//!
//! # The data set
//!
//! Table 1 gives Render-sockets' volume as 167 x 63 x 34 voxels but not the data, so
//! [`generate_volume`] makes one of any size: a stylised fish, one byte of density per voxel.
//! Shapes are placed in coordinates that run from -1 to 1 along the volume's longest side,
//! with the same scale on every axis (a sphere stays round), so at 167 x 63 x 34 the other
//! sides run to ±0.377 and ±0.204; a box flatter than that cuts the fish. The parts, each
//! with its own density (which the transfer function colours):
//!
//! | part | shape | density |
//! |---|---|---|
//! | skin | shell of the ellipsoid with semi-axes 0.92, 0.34, 0.19, from 0.83 to 1.01 of its radius | up to 70 |
//! | flesh | inside the skin, plus a hashed speckle of 0-11 | 22 |
//! | spine | tube of radius 0.03 along a slight curve, cut into vertebrae | 210 |
//! | ribs | nine thin slabs across the body, between 0.70 and 0.80 of its radius | 175 |
//! | heart | ball of radius 0.09 at (0.35, -0.08, 0) | up to 150 |
//! | swim bladder | ellipsoidal shell, semi-axes 0.25, 0.07, 0.08 at (-0.1, 0.1, 0) | 120 |
//! | eyes | balls of radius 0.045 at (0.70, 0.08, ±0.09) | 235 |
//! | tail fin | thin plate in the plane z = 0 behind x = -0.84 | 95 |
//!
//! Each part fades out at its border (a quadratic profile), so the data are smooth enough for
//! trilinear sampling; where parts overlap the densest wins. The volume uses only `+ - * /`,
//! `sqrt` and `floor` (correctly rounded in IEEE arithmetic), so it is the same on every
//! machine.
//!
//! # The ray caster
//!
//! Each node prepares its copy of the volume ([`Volume::prepare`]): density and an integer
//! central-difference gradient per voxel. A pixel's ray starts from the [`View`] (orthographic
//! or perspective, orbiting the volume's centre by an azimuth and an elevation, framed so the
//! whole box is in the picture); it is clipped to the volume's box and sampled every `step`
//! voxels from its entry point with trilinear interpolation of density and gradient; the
//! transfer function ([`TransferFunction`]) maps density to colour and opacity per voxel of
//! path; the colour is shaded with the gradient (a headlight: ambient, diffuse and a
//! specular highlight); samples are composited front to back and the ray stops once its
//! opacity reaches 0.99 (early ray termination). What is left shows a vertical background
//! gradient.
//!
//! All of it is `f32` arithmetic on values computed from the pixel's coordinates and the
//! [`View`] (whose numbers the controller sends to its workers as exact bits), with no fused
//! or reordered operations (Rust does neither), so a pixel has the same bits whichever node
//! renders it, in whatever tile: the parallel image equals the sequential one exactly.

use serde::Serialize;
use std::io;
use std::path::Path;

/// The problem: the data set, the picture and the parallel version's task size.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct RenderParams {
    /// Voxels along x, y (up) and z.
    pub volume: [usize; 3],
    /// Image width and height in pixels.
    pub image: [usize; 2],
    /// Tile (task) width and height in pixels; the last row and column of tiles may be
    /// smaller.
    pub tile: [usize; 2],
    /// Camera azimuth about the vertical (y) axis, in degrees (0: looking along -z).
    pub azimuth: f64,
    /// Camera elevation above the x-z plane, in degrees.
    pub elevation: f64,
    /// Horizontal field of view in degrees; 0 is an orthographic projection.
    pub fov: f64,
    /// Distance between samples along a ray, in voxels.
    pub step: f64,
    /// Tiles each worker holds at once (the one it renders and those queued behind it), at
    /// most every tile.
    pub in_flight: usize,
}

impl RenderParams {
    /// Table 1's volume, 167 x 63 x 34. Table 1 does not give the picture: a 512 x 256 image
    /// in 16 x 16 tiles (512 tasks), seen from 30° to the side and 20° above, through a
    /// 35° perspective, one sample per voxel of path, two tiles in flight per worker.
    pub const PAPER: RenderParams = RenderParams {
        volume: [167, 63, 34],
        image: [512, 256],
        tile: [16, 16],
        azimuth: 30.0,
        elevation: 20.0,
        fov: 35.0,
        step: 1.0,
        in_flight: 2,
    };
    /// A small problem for tests: the same fish in 42 x 16 x 9 voxels, a 64 x 40 image in 8 x
    /// 8 tiles (40 tasks, enough to keep 16 nodes' workers busy).
    pub const TEST: RenderParams = RenderParams {
        volume: [42, 16, 9],
        image: [64, 40],
        tile: [8, 8],
        azimuth: 30.0,
        elevation: 20.0,
        fov: 35.0,
        step: 0.5,
        in_flight: 2,
    };

    /// Refuses problems the kernel cannot run.
    pub fn check(&self) -> Result<(), String> {
        let [x, y, z] = self.volume;
        if x < 2 || y < 2 || z < 2 || x.saturating_mul(y).saturating_mul(z) > 1 << 28 {
            return Err(format!(
                "--volume {x}x{y}x{z}: at least 2 voxels a side, at most 2^28 voxels"
            ));
        }
        let [w, h] = self.image;
        if w == 0 || h == 0 || w > 1 << 14 || h > 1 << 14 {
            return Err(format!("--image-size {w}x{h}: 1 to 16384 pixels a side"));
        }
        let [tw, th] = self.tile;
        if tw == 0 || th == 0 || tw > w || th > h {
            return Err(format!(
                "--tile {tw}x{th}: at least 1 pixel, at most the image ({w}x{h})"
            ));
        }
        if !(self.fov >= 0.0 && self.fov < 170.0) {
            return Err(format!(
                "--fov {}: 0 (orthographic) to below 170 degrees",
                self.fov
            ));
        }
        if !(self.azimuth.is_finite() && self.elevation.abs() < 89.0) {
            return Err(format!(
                "--azimuth {} --elevation {}: the elevation between -89 and 89 degrees",
                self.azimuth, self.elevation
            ));
        }
        if !(self.step >= 0.01 && self.step <= 64.0) {
            return Err(format!("--step {}: 0.01 to 64 voxels", self.step));
        }
        if self.in_flight == 0 || self.in_flight > self.tiles() {
            return Err(format!(
                "--in-flight {}: 1 to the number of tiles ({}); a worker needs at least one",
                self.in_flight,
                self.tiles()
            ));
        }
        Ok(())
    }

    /// Voxels in the volume.
    pub fn voxels(&self) -> usize {
        self.volume.iter().product()
    }

    /// Tiles across and down.
    pub fn tile_grid(&self) -> [usize; 2] {
        [
            self.image[0].div_ceil(self.tile[0]),
            self.image[1].div_ceil(self.tile[1]),
        ]
    }

    /// Number of tiles (tasks).
    pub fn tiles(&self) -> usize {
        let [a, d] = self.tile_grid();
        a * d
    }

    /// Tile `i` (row-major from the top left).
    pub fn tile_rect(&self, i: usize) -> Rect {
        let across = self.tile_grid()[0];
        let (x, y) = ((i % across) * self.tile[0], (i / across) * self.tile[1]);
        Rect {
            x,
            y,
            w: self.tile[0].min(self.image[0] - x),
            h: self.tile[1].min(self.image[1] - y),
        }
    }
}

/// A rectangle of pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    /// Left column.
    pub x: usize,
    /// Top row.
    pub y: usize,
    /// Width.
    pub w: usize,
    /// Height.
    pub h: usize,
}

impl Rect {
    /// Bytes of its RGB pixels.
    pub fn bytes(&self) -> usize {
        self.w * self.h * 3
    }
}

/// Copies a tile's RGB pixels (rows of `r.w`) into `image` (rows of `width`).
pub fn place_tile(image: &mut [u8], width: usize, r: Rect, pixels: &[u8]) {
    for row in 0..r.h {
        let at = ((r.y + row) * width + r.x) * 3;
        image[at..at + r.w * 3].copy_from_slice(&pixels[row * r.w * 3..(row + 1) * r.w * 3]);
    }
}

/// A small integer hash (for the flesh's speckle).
fn hash3(x: usize, y: usize, z: usize) -> u32 {
    let mut h = (x as u32).wrapping_mul(0x9E37_79B1)
        ^ (y as u32).wrapping_mul(0x85EB_CA77)
        ^ (z as u32).wrapping_mul(0xC2B2_AE3D);
    h ^= h >> 15;
    h = h.wrapping_mul(0x2C1B_3C6D);
    h ^= h >> 12;
    h
}

/// `peak` at the centre of a part, falling quadratically to 0 at its border: `q` is the
/// squared distance in units of the part's radius.
fn bump(q: f64, peak: f64) -> f64 {
    if q < 1.0 {
        peak * (1.0 - q)
    } else {
        0.0
    }
}

/// The density at a point (see the module documentation).
fn fish(x: f64, y: f64, z: f64) -> f64 {
    let sq = |v: f64| v * v;
    // Body: radius in units of the ellipsoid.
    let r = (sq(x / 0.92) + sq(y / 0.34) + sq(z / 0.19)).sqrt();
    let mut d: f64 = bump(sq((r - 0.92) / 0.09), 70.0);
    if r < 0.92 {
        d = d.max(22.0);
    }
    // Spine, slightly curved, cut into vertebrae.
    if x.abs() < 0.8 {
        let yc = 0.05 - 0.04 * x * x;
        let q = (sq(y - yc) + sq(z)) / sq(0.03);
        let seg = (x + 1.0) * 14.0;
        if seg - seg.floor() < 0.72 {
            d = d.max(bump(q, 210.0));
        }
    }
    // Ribs: thin slabs across the lower body.
    if (0.70..0.80).contains(&r) && y < 0.08 {
        for k in 0..9 {
            let xk = -0.45 + 0.1 * k as f64;
            d = d.max(bump(sq((x - xk) / 0.014), 175.0));
        }
    }
    // Heart.
    d = d.max(bump(
        (sq(x - 0.35) + sq(y + 0.08) + sq(z)) / sq(0.09),
        150.0,
    ));
    // Swim bladder: an ellipsoidal shell.
    let b = (sq((x + 0.1) / 0.25) + sq((y - 0.1) / 0.07) + sq(z / 0.08)).sqrt();
    d = d.max(bump(sq((b - 0.85) / 0.15), 120.0));
    // Eyes.
    for ez in [-0.09, 0.09] {
        d = d.max(bump(
            (sq(x - 0.70) + sq(y - 0.08) + sq(z - ez)) / sq(0.045),
            235.0,
        ));
    }
    // Tail fin: a plate widening backwards.
    if x < -0.84 && x > -1.0 {
        let half = 0.04 + (-0.84 - x) * 2.2;
        if y.abs() < half {
            d = d.max(bump(sq(z / 0.02), 95.0));
        }
    }
    d
}

/// The procedural data set of `dims` voxels (x fastest, then y, then z): see the module
/// documentation.
pub fn generate_volume(dims: [usize; 3]) -> Vec<u8> {
    let [nx, ny, nz] = dims;
    let half = nx.max(ny).max(nz) as f64 / 2.0;
    let coord = |i: usize, n: usize| (i as f64 + 0.5 - n as f64 / 2.0) / half;
    let mut v = Vec::with_capacity(nx * ny * nz);
    for k in 0..nz {
        let z = coord(k, nz);
        for j in 0..ny {
            let y = coord(j, ny);
            for i in 0..nx {
                let x = coord(i, nx);
                let mut d = fish(x, y, z);
                if (22.0..23.0).contains(&d) {
                    // Flesh: a speckle, so it is not one flat value.
                    d += (hash3(i, j, k) % 12) as f64;
                }
                v.push(d.clamp(0.0, 255.0) as u8);
            }
        }
    }
    v
}

/// A node's prepared copy of the data set: per voxel, the density and the central-difference
/// gradient (integers, exact), as `f32`s side by side for one trilinear interpolation.
pub struct Volume {
    dims: [usize; 3],
    data: Vec<[f32; 4]>,
}

impl Volume {
    /// Prepares `densities` (as [`generate_volume`] lays them out) of `dims` voxels.
    pub fn prepare(dims: [usize; 3], densities: &[u8]) -> Volume {
        let [nx, ny, nz] = dims;
        assert_eq!(densities.len(), nx * ny * nz, "volume size");
        let at = |i: usize, j: usize, k: usize| densities[i + nx * (j + ny * k)] as i32;
        let mut data = Vec::with_capacity(densities.len());
        for k in 0..nz {
            for j in 0..ny {
                for i in 0..nx {
                    let gx = at((i + 1).min(nx - 1), j, k) - at(i.saturating_sub(1), j, k);
                    let gy = at(i, (j + 1).min(ny - 1), k) - at(i, j.saturating_sub(1), k);
                    let gz = at(i, j, (k + 1).min(nz - 1)) - at(i, j, k.saturating_sub(1));
                    data.push([at(i, j, k) as f32, gx as f32, gy as f32, gz as f32]);
                }
            }
        }
        Volume { dims, data }
    }

    /// The dimensions.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Density and gradient at `p` (inside the box `[0, n-1]` on each axis), trilinearly
    /// interpolated.
    #[inline]
    fn sample(&self, p: [f32; 3]) -> [f32; 4] {
        let [nx, ny, nz] = self.dims;
        let cell = |v: f32, n: usize| {
            let v = v.clamp(0.0, (n - 1) as f32);
            let i = (v as usize).min(n - 2);
            (i, v - i as f32)
        };
        let (i, fx) = cell(p[0], nx);
        let (j, fy) = cell(p[1], ny);
        let (k, fz) = cell(p[2], nz);
        let base = i + nx * (j + ny * k);
        let (sy, sz) = (nx, nx * ny);
        let d = &self.data;
        let lerp = |a: [f32; 4], b: [f32; 4], f: f32| {
            [
                a[0] + (b[0] - a[0]) * f,
                a[1] + (b[1] - a[1]) * f,
                a[2] + (b[2] - a[2]) * f,
                a[3] + (b[3] - a[3]) * f,
            ]
        };
        let x00 = lerp(d[base], d[base + 1], fx);
        let x10 = lerp(d[base + sy], d[base + sy + 1], fx);
        let x01 = lerp(d[base + sz], d[base + sz + 1], fx);
        let x11 = lerp(d[base + sy + sz], d[base + sy + sz + 1], fx);
        lerp(lerp(x00, x10, fy), lerp(x01, x11, fy), fz)
    }
}

/// Where each pixel's ray comes from: pixel `(x, y)`'s ray starts at `o0 + (x + ½) odx +
/// (y + ½) ody` and points along `d0 + (x + ½) ddx + (y + ½) ddy`, normalised. Orthographic
/// views move the origin and keep the direction; perspective views the other way round.
/// Computed once (in `f64`, with the trigonometry) and then used as exact `f32`s: the
/// controller sends these bits to its workers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// Origin of pixel (-½, -½).
    pub o0: [f32; 3],
    /// Origin step per column.
    pub odx: [f32; 3],
    /// Origin step per row.
    pub ody: [f32; 3],
    /// Direction of pixel (-½, -½) (not normalised).
    pub d0: [f32; 3],
    /// Direction step per column.
    pub ddx: [f32; 3],
    /// Direction step per row.
    pub ddy: [f32; 3],
}

type V3 = [f64; 3];
fn add(a: V3, b: V3) -> V3 {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}
fn scale(a: V3, s: f64) -> V3 {
    [a[0] * s, a[1] * s, a[2] * s]
}
fn dot(a: V3, b: V3) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}
fn cross(a: V3, b: V3) -> V3 {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}
fn unit(a: V3) -> V3 {
    scale(a, 1.0 / dot(a, a).sqrt())
}
fn f32s(a: V3) -> [f32; 3] {
    [a[0] as f32, a[1] as f32, a[2] as f32]
}

impl View {
    /// The camera of `p`: orbiting the volume's centre, framing its whole box with a 4%
    /// margin.
    pub fn new(p: &RenderParams) -> View {
        let [nx, ny, nz] = p.volume;
        let (w, h) = (p.image[0] as f64, p.image[1] as f64);
        let aspect = w / h;
        let c = [
            (nx - 1) as f64 / 2.0,
            (ny - 1) as f64 / 2.0,
            (nz - 1) as f64 / 2.0,
        ];
        let (az, el) = (p.azimuth.to_radians(), p.elevation.to_radians());
        // From the eye towards the centre.
        let f = [-el.cos() * az.sin(), -el.sin(), -el.cos() * az.cos()];
        let r = unit(cross(f, [0.0, 1.0, 0.0]));
        let u = cross(r, f);
        // The box's corners relative to the centre, in camera coordinates.
        let corners: Vec<V3> = (0..8)
            .map(|i| {
                let k = [(i & 1) as f64, ((i >> 1) & 1) as f64, ((i >> 2) & 1) as f64];
                let q = [
                    (k[0] - 0.5) * (nx - 1) as f64,
                    (k[1] - 0.5) * (ny - 1) as f64,
                    (k[2] - 0.5) * (nz - 1) as f64,
                ];
                [dot(q, r), dot(q, u), dot(q, f)]
            })
            .collect();
        let radius = dot(c, c).sqrt() + 1.0;
        let margin = 1.04;
        let zero = [0.0; 3];
        let (o0, odx, ody, d0, ddx, ddy);
        if p.fov == 0.0 {
            let su = corners.iter().map(|q| q[0].abs()).fold(0.0, f64::max);
            let sv = corners.iter().map(|q| q[1].abs()).fold(0.0, f64::max);
            let half_w = su.max(sv * aspect) * margin;
            let half_h = half_w / aspect;
            // Rays start behind the box and go along f.
            let start = add(c, scale(f, -2.0 * radius));
            o0 = add(add(start, scale(r, -half_w)), scale(u, half_h));
            odx = scale(r, 2.0 * half_w / w);
            ody = scale(u, -2.0 * half_h / h);
            (d0, ddx, ddy) = (f, zero, zero);
        } else {
            let tw = (p.fov.to_radians() / 2.0).tan();
            let th = tw / aspect;
            // Far enough that every corner is inside the field of view.
            let dist = corners
                .iter()
                .map(|q| (q[0].abs() * margin / tw).max(q[1].abs() * margin / th) - q[2])
                .fold(0.0, f64::max);
            let eye = add(c, scale(f, -dist));
            (o0, odx, ody) = (eye, zero, zero);
            d0 = add(add(f, scale(r, -tw)), scale(u, th));
            ddx = scale(r, 2.0 * tw / w);
            ddy = scale(u, -2.0 * th / h);
        }
        View {
            o0: f32s(o0),
            odx: f32s(odx),
            ody: f32s(ody),
            d0: f32s(d0),
            ddx: f32s(ddx),
            ddy: f32s(ddy),
        }
    }

    /// The 18 numbers, exactly.
    pub fn to_bits(&self) -> [u32; 18] {
        let mut out = [0; 18];
        let all = [self.o0, self.odx, self.ody, self.d0, self.ddx, self.ddy];
        for (i, v) in all.iter().flatten().enumerate() {
            out[i] = v.to_bits();
        }
        out
    }

    /// From [`View::to_bits`].
    pub fn from_bits(b: &[u32; 18]) -> View {
        let v = |i: usize| {
            [
                f32::from_bits(b[3 * i]),
                f32::from_bits(b[3 * i + 1]),
                f32::from_bits(b[3 * i + 2]),
            ]
        };
        View {
            o0: v(0),
            odx: v(1),
            ody: v(2),
            d0: v(3),
            ddx: v(4),
            ddy: v(5),
        }
    }
}

/// Density to colour and opacity: a table of 256 entries, piecewise linear between control
/// points, looked up with linear interpolation. Opacity is per voxel of path.
pub struct TransferFunction {
    table: Vec<[f32; 4]>,
}

/// The control points: density, red, green, blue, opacity per voxel. Below 30: empty (the
/// flesh's 22-33 stays nearly clear); skin a translucent blue; the swim bladder and heart red;
/// bone and eyes near white and nearly opaque.
const TF_POINTS: &[(f32, [f32; 4])] = &[
    (0.0, [0.0, 0.0, 0.0, 0.0]),
    (28.0, [0.0, 0.0, 0.0, 0.0]),
    (34.0, [0.60, 0.45, 0.35, 0.006]),
    (50.0, [0.30, 0.55, 0.90, 0.05]),
    (75.0, [0.35, 0.70, 1.00, 0.14]),
    (100.0, [0.60, 0.65, 0.80, 0.10]),
    (115.0, [1.00, 0.40, 0.25, 0.30]),
    (150.0, [1.00, 0.60, 0.30, 0.45]),
    (170.0, [1.00, 0.92, 0.75, 0.60]),
    (255.0, [1.00, 1.00, 0.95, 0.95]),
];

impl Default for TransferFunction {
    fn default() -> TransferFunction {
        let mut table = Vec::with_capacity(256);
        for d in 0..256 {
            let d = d as f32;
            let i = TF_POINTS
                .windows(2)
                .position(|w| d <= w[1].0)
                .unwrap_or(TF_POINTS.len() - 2);
            let ((d0, a), (d1, b)) = (TF_POINTS[i], TF_POINTS[i + 1]);
            let f = (d - d0) / (d1 - d0);
            table.push([
                a[0] + (b[0] - a[0]) * f,
                a[1] + (b[1] - a[1]) * f,
                a[2] + (b[2] - a[2]) * f,
                a[3] + (b[3] - a[3]) * f,
            ]);
        }
        TransferFunction { table }
    }
}

impl TransferFunction {
    #[inline]
    fn at(&self, d: f32) -> [f32; 4] {
        let d = d.clamp(0.0, 255.0);
        let i = (d as usize).min(254);
        let f = d - i as f32;
        let (a, b) = (self.table[i], self.table[i + 1]);
        [
            a[0] + (b[0] - a[0]) * f,
            a[1] + (b[1] - a[1]) * f,
            a[2] + (b[2] - a[2]) * f,
            a[3] + (b[3] - a[3]) * f,
        ]
    }
}

/// Background at the top and at the bottom of the picture.
const BG_TOP: [f32; 3] = [0.10, 0.12, 0.18];
const BG_BOTTOM: [f32; 3] = [0.01, 0.01, 0.03];
/// A ray stops once this opaque.
const OPAQUE: f32 = 0.99;

/// Renders pixels of one picture of one volume.
pub struct Renderer {
    vol: Volume,
    view: View,
    tf: TransferFunction,
    step: f32,
    width: usize,
    height: usize,
}

impl Renderer {
    /// A renderer of `image` (width, height) pixels of `vol` seen through `view`, sampling
    /// every `step` voxels.
    pub fn new(vol: Volume, view: View, step: f32, image: [usize; 2]) -> Renderer {
        Renderer {
            vol,
            view,
            tf: TransferFunction::default(),
            step,
            width: image[0],
            height: image[1],
        }
    }

    /// The renderer of problem `p` for the data set `densities`.
    pub fn of(p: &RenderParams, densities: &[u8]) -> Renderer {
        Renderer::new(
            Volume::prepare(p.volume, densities),
            View::new(p),
            p.step as f32,
            p.image,
        )
    }

    /// The colour of pixel `(x, y)`: a function of the pixel alone.
    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let v = &self.view;
        let (px, py) = (x as f32 + 0.5, y as f32 + 0.5);
        let mut o = [0.0f32; 3];
        let mut d = [0.0f32; 3];
        for a in 0..3 {
            o[a] = v.o0[a] + px * v.odx[a] + py * v.ody[a];
            d[a] = v.d0[a] + px * v.ddx[a] + py * v.ddy[a];
        }
        let len = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
        for c in &mut d {
            *c /= len;
        }
        let (mut col, mut alpha) = ([0.0f32; 3], 0.0f32);
        if let Some((t0, t1)) = self.clip(o, d) {
            let steps = ((t1 - t0) / self.step) as usize + 1;
            for k in 0..steps {
                let t = t0 + k as f32 * self.step;
                let p = [o[0] + t * d[0], o[1] + t * d[1], o[2] + t * d[2]];
                let s = self.vol.sample(p);
                let c = self.tf.at(s[0]);
                let a = (c[3] * self.step).min(1.0);
                if a <= 0.0 {
                    continue;
                }
                // Headlight shading: the light comes from the eye, along -d.
                let g2 = s[1] * s[1] + s[2] * s[2] + s[3] * s[3];
                let (diffuse, spec) = if g2 > 1.0 {
                    let nl = ((s[1] * d[0] + s[2] * d[1] + s[3] * d[2]) / g2.sqrt()).abs();
                    let n2 = nl * nl;
                    let n4 = n2 * n2;
                    let n8 = n4 * n4;
                    (0.3 + 0.7 * nl, 0.35 * n8 * n8)
                } else {
                    (1.0, 0.0)
                };
                let w = (1.0 - alpha) * a;
                for i in 0..3 {
                    col[i] += w * (c[i] * diffuse + spec);
                }
                alpha += w;
                if alpha >= OPAQUE {
                    break;
                }
            }
        }
        let f = py / self.height as f32;
        let mut out = [0u8; 3];
        for i in 0..3 {
            let bg = BG_TOP[i] + (BG_BOTTOM[i] - BG_TOP[i]) * f;
            let c = col[i] + (1.0 - alpha) * bg;
            out[i] = (c.clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
        }
        out
    }

    /// The part `[t0, t1]` of the ray `o + t d` inside the volume's box, if any (slabs).
    fn clip(&self, o: [f32; 3], d: [f32; 3]) -> Option<(f32, f32)> {
        let (mut t0, mut t1) = (0.0f32, f32::INFINITY);
        for a in 0..3 {
            let hi = (self.vol.dims[a] - 1) as f32;
            if d[a].abs() < 1e-9 {
                if o[a] < 0.0 || o[a] > hi {
                    return None;
                }
                continue;
            }
            let (ta, tb) = ((0.0 - o[a]) / d[a], (hi - o[a]) / d[a]);
            t0 = t0.max(ta.min(tb));
            t1 = t1.min(ta.max(tb));
        }
        (t0 <= t1).then_some((t0, t1))
    }

    /// Renders `r` into `out` (replaced by its RGB rows).
    pub fn tile(&self, r: Rect, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(r.bytes());
        for y in r.y..r.y + r.h {
            for x in r.x..r.x + r.w {
                out.extend_from_slice(&self.pixel(x, y));
            }
        }
    }

    /// The whole picture, row by row (RGB, rows of the image width).
    pub fn image(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.width * self.height * 3);
        for y in 0..self.height {
            for x in 0..self.width {
                out.extend_from_slice(&self.pixel(x, y));
            }
        }
        out
    }
}

/// The first pixel where two pictures differ, and how many differ.
pub fn diff(width: usize, got: &[u8], want: &[u8]) -> Option<((usize, usize), usize)> {
    let bad = |i: usize| got.get(3 * i..3 * i + 3) != want.get(3 * i..3 * i + 3);
    let n = got.len().max(want.len()).div_ceil(3);
    let first = (0..n).find(|&i| bad(i))?;
    let count = (first..n).filter(|&i| bad(i)).count();
    Some(((first % width, first / width), count))
}

/// Pixels that differ from the background (the volume's share of the picture).
pub fn coverage(p: &RenderParams, image: &[u8]) -> usize {
    let [w, h] = p.image;
    let mut n = 0;
    for y in 0..h {
        let f = (y as f32 + 0.5) / h as f32;
        let bg: Vec<u8> = (0..3)
            .map(|i| {
                let c = BG_TOP[i] + (BG_BOTTOM[i] - BG_TOP[i]) * f;
                (c.clamp(0.0, 1.0) * 255.0 + 0.5) as u8
            })
            .collect();
        n += (0..w)
            .filter(|x| image[(y * w + x) * 3..(y * w + x) * 3 + 3] != bg[..])
            .count();
    }
    n
}

/// Writes an RGB picture as a PNG file (creating its directory).
pub fn write_png(path: &Path, width: usize, height: usize, rgb: &[u8]) -> io::Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    // Written beside and renamed, so a reader never sees half a file.
    let tmp = path.with_extension(format!("png.{}.tmp", std::process::id()));
    let file = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    let mut enc = png::Encoder::new(file, width as u32, height as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(io::Error::other)?;
    w.write_image_data(rgb).map_err(io::Error::other)?;
    w.finish().map_err(io::Error::other)?;
    std::fs::rename(&tmp, path)
}

/// The plain sequential render of `p`: the time of the render in ns and the picture. The
/// check: the fish is in it (some pixel is not background).
pub fn sequential(p: &RenderParams) -> Result<(u64, Vec<u8>), String> {
    let densities = generate_volume(p.volume);
    let r = Renderer::of(p, &densities);
    let t0 = vmmc::pace::now_ns();
    let image = r.image();
    let t = vmmc::pace::now_ns() - t0;
    if coverage(p, &image) == 0 {
        return Err("the picture shows nothing but background".into());
    }
    Ok((t, image))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiled(p: &RenderParams, r: &Renderer) -> Vec<u8> {
        let mut image = vec![0u8; p.image[0] * p.image[1] * 3];
        let mut buf = Vec::new();
        // In reverse order: a pixel must not depend on what was rendered before it.
        for i in (0..p.tiles()).rev() {
            let rect = p.tile_rect(i);
            r.tile(rect, &mut buf);
            assert_eq!(buf.len(), rect.bytes());
            place_tile(&mut image, p.image[0], rect, &buf);
        }
        image
    }

    #[test]
    fn the_tiled_render_equals_the_whole_image_render() {
        for (fov, tile) in [
            (35.0, [8, 8]),
            (0.0, [7, 5]),
            (60.0, [64, 1]),
            (20.0, [3, 40]),
        ] {
            let p = RenderParams {
                fov,
                tile,
                ..RenderParams::TEST
            };
            p.check().unwrap();
            let vol = generate_volume(p.volume);
            let r = Renderer::of(&p, &vol);
            let whole = r.image();
            assert!(coverage(&p, &whole) > whole.len() / 3 / 10, "fov {fov}");
            assert_eq!(diff(p.image[0], &tiled(&p, &r), &whole), None, "fov {fov}");
        }
    }

    #[test]
    fn the_view_goes_through_its_bits_unchanged() {
        let v = View::new(&RenderParams::PAPER);
        assert_eq!(View::from_bits(&v.to_bits()), v);
    }

    #[test]
    fn tiles_cover_the_image_once() {
        let p = RenderParams {
            image: [37, 23],
            tile: [8, 5],
            ..RenderParams::TEST
        };
        let mut seen = vec![0u8; 37 * 23];
        for i in 0..p.tiles() {
            let r = p.tile_rect(i);
            for y in r.y..r.y + r.h {
                for x in r.x..r.x + r.w {
                    seen[y * 37 + x] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1));
        assert_eq!(p.tiles(), 5 * 5);
    }

    #[test]
    fn the_volume_has_its_parts() {
        let v = generate_volume(RenderParams::PAPER.volume);
        assert_eq!(v.len(), 167 * 63 * 34);
        let count = |lo: u8, hi: u8| v.iter().filter(|&&d| d >= lo && d <= hi).count();
        assert!(count(200, 255) > 100, "bone and eyes");
        assert!(count(60, 80) > 1000, "skin");
        assert!(count(0, 0) > v.len() / 4, "empty space around the fish");
    }

    #[test]
    fn a_difference_is_found_and_counted() {
        let a = vec![7u8; 4 * 3 * 3];
        let mut b = a.clone();
        assert_eq!(diff(4, &a, &b), None);
        b[3 * 5] ^= 1;
        b[3 * 11 + 2] ^= 1;
        assert_eq!(diff(4, &b, &a), Some(((1, 1), 2)));
    }

    #[test]
    fn a_png_reads_back() {
        let p = RenderParams::TEST;
        let (_, image) = sequential(&p).unwrap();
        let path = std::env::temp_dir().join(format!("render-test-{}/x.png", std::process::id()));
        write_png(&path, p.image[0], p.image[1], &image).unwrap();
        let mut reader =
            png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()))
                .read_info()
                .unwrap();
        let mut buf = vec![0u8; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (64, 40));
        assert_eq!(&buf[..info.buffer_size()], &image[..]);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
