// The channel with a circular obstacle of the DFG "flow around a cylinder" benchmark
// (Schäfer & Turek 1996): [0, 2.2] × [0, 0.41], the cylinder of radius 0.05 at (0.2, 0.2).
// A coarse triangle mesh for tensorfem, which refines it uniformly (new boundary nodes lie on
// the coarse edges: the circle is not snapped, so refined meshes keep this polygon).
// Regenerate channel-cylinder.msh with:  gmsh channel-cylinder.geo -2 -o channel-cylinder.msh
lc = 0.1;
lc_obstacle = 0.03;
Point(1) = {0, 0, 0, lc};
Point(2) = {2.2, 0, 0, lc};
Point(3) = {2.2, 0.41, 0, lc};
Point(4) = {0, 0.41, 0, lc};
Point(5) = {0.2, 0.2, 0, lc_obstacle};
Point(6) = {0.25, 0.2, 0, lc_obstacle};
Point(7) = {0.2, 0.25, 0, lc_obstacle};
Point(8) = {0.15, 0.2, 0, lc_obstacle};
Point(9) = {0.2, 0.15, 0, lc_obstacle};
Line(1) = {1, 2};
Line(2) = {2, 3};
Line(3) = {3, 4};
Line(4) = {4, 1};
Circle(5) = {6, 5, 7};
Circle(6) = {7, 5, 8};
Circle(7) = {8, 5, 9};
Circle(8) = {9, 5, 6};
Curve Loop(1) = {1, 2, 3, 4};
Curve Loop(2) = {5, 6, 7, 8};
Plane Surface(1) = {1, 2};
Physical Curve("inflow") = {4};
Physical Curve("outflow") = {2};
Physical Curve("walls") = {1, 3};
Physical Curve("obstacle") = {5, 6, 7, 8};
Physical Surface("fluid") = {1};
Mesh.MshFileVersion = 4.1;
